//! `mcpl check` against scripted servers: exit codes, the `--json` contract, transcripts,
//! and exactly which checks each misbehaviour fails.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

use common::ids_with;

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcpl-scripted-server");
/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

fn check(args: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--json", "--timeout", "1", "--watch", "0"])
        .args(args)
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", out.stdout));
    (out.status.code().unwrap(), doc)
}

fn scripted(mode: &str) -> (i32, Value) {
    check(&["--", FIXTURE, mode])
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

fn assert_complete(doc: &Value) {
    let checks = doc["checks"].as_array().unwrap();
    let ids: BTreeSet<&str> = checks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), checks.len(), "ids unique");
    assert!(checks.len() >= 14);
    for c in checks {
        assert!(c["section"].as_str().unwrap().starts_with('§'), "{c}");
        assert!(["pass", "fail", "warn", "skip"].contains(&c["status"].as_str().unwrap()));
        assert!(c["detail"].is_string());
    }
    let s = &doc["summary"];
    let total: u64 = ["pass", "fail", "warn", "skip"]
        .iter()
        .map(|k| s[*k].as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, checks.len());
}

#[test]
fn s6_4_undeclared_use_is_a_warning_not_a_failure() {
    let (code, doc) = scripted("undeclared-use");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(
        ids_with(&doc, "warn"),
        set(&["featuresets.declaration-matches"]),
        "{doc:#}"
    );
    assert_eq!(code, 0);
}

/// AUDIT-001 §2.5 (dog_mcp: `uses: ["tools"]` while answering hooks with injections): a
/// hook answered with injections under a declared, available set whose `uses` lacks the
/// inject leaf is a declaration mismatch (§6.4 rule 2, SHOULD warn), as a push under such a
/// set is; nothing fails.
#[test]
fn s6_4_injection_under_a_set_not_declaring_it_is_a_warning() {
    let (code, doc) = scripted("hook-undeclared-use");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(
        ids_with(&doc, "warn"),
        set(&["featuresets.declaration-matches"]),
        "{doc:#}"
    );
    let d = doc["checks"]
        .as_array()
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["id"] == "featuresets.declaration-matches")
        })
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_default();
    assert!(
        d.contains("\"demo.push\" exercises contextHooks.beforeInference.inject"),
        "{d}"
    );
    assert_eq!(code, 0);
}

/// Answers the spec does not pin to an error code are warnings: a refusal receipt to a
/// contradictory policy (§5.4), a result to `channels/close` of an unknown channel (§14.6).
#[test]
fn tolerated_answers_are_warnings() {
    for (mode, id) in [
        ("contradiction-refusal", "policy.contradiction-rejected"),
        ("close-result", "channels.close-unknown-error"),
    ] {
        let (code, doc) = scripted(mode);
        assert_eq!(ids_with(&doc, "fail"), set(&[]), "{mode}: {doc:#}");
        assert_eq!(ids_with(&doc, "warn"), set(&[id]), "{mode}: {doc:#}");
        assert_eq!(code, 0, "{mode}");
    }
}

/// The scripted server answers the checker's requests inside its batches: that fails
/// `transport.frames-valid` (JSON-RPC 2.0 §5: a request sent alone is answered with a single
/// Response object), and nothing else.
#[test]
fn json_rpc_batches_are_split_and_judged() {
    passes_but_for_batched_answers(
        "batch",
        &[
            "rpc.unknown-method-errors",
            "push.event-shape",
            "channels.descriptor-shape",
        ],
    );
}

/// Runs a scripted `mode`: exactly `ids` fail, exit 1; the report is returned.
fn fails_exactly(mode: &str, ids: &[&str]) -> Value {
    let (code, doc) = scripted(mode);
    assert_complete(&doc);
    assert_eq!(ids_with(&doc, "fail"), set(ids), "{mode}: {doc:#}");
    assert_eq!(code, 1, "{mode}");
    doc
}

/// §5.4: matching is over full paths with `*` wildcards, so `channels.*` granted beside
/// `channels.publish` denied names `channels.publish` both granted and denied, and the policy
/// is malformed. A server comparing the two lists as strings rejects only a path written in
/// both (the one contradiction the checker sent) and took the pattern form as a policy: it
/// passed `policy.contradiction-rejected`. The scripted fixture's own rule was that one.
#[test]
fn a_contradiction_by_pattern_is_rejected_too() {
    let doc = fails_exactly("textual-contradiction", &["policy.contradiction-rejected"]);
    let d = doc["checks"]
        .as_array()
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["id"] == "policy.contradiction-rejected")
        })
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        d.contains("answered as a policy") && d.contains(".*"),
        "{d}"
    );
}

/// §17.5, §6.2: a manifest served after a change is validated exactly as at `initialize`.
/// A server whose announced change adds a feature set with an invalid `uses` (`pushEvent`)
/// passed `manifest.uses-valid`, which judged only the manifest `initialize` carried.
#[test]
fn a_manifest_changed_to_invalid_uses_fails_uses_valid() {
    let doc = fails_exactly("changed-invalid-uses", &["manifest.uses-valid"]);
    let d = doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "manifest.uses-valid"))
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(d.contains("demo.new") && d.contains("mcpl/manifest"), "{d}");
}

/// Runs a scripted `mode`: nothing fails, exit 0, and each of `ids` passes.
fn passes_cleanly(mode: &str, ids: &[&str]) {
    let (code, doc) = scripted(mode);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{mode}: {doc:#}");
    for id in ids {
        assert!(ids_with(&doc, "pass").contains(*id), "{mode} {id}: {doc:#}");
    }
    assert_eq!(code, 0, "{mode}");
}

/// Runs a scripted `mode` whose server answers the checker's requests (each sent alone)
/// inside batches: only `transport.frames-valid` fails, naming that (JSON-RPC 2.0 §5: a
/// single Response object answers a request sent alone), exit 1, and each of `ids` passes.
fn passes_but_for_batched_answers(mode: &str, ids: &[&str]) {
    let doc = fails_exactly(mode, &["transport.frames-valid"]);
    let d = doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "transport.frames-valid"))
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_default();
    assert!(
        d.contains("in a batch (an array) to a request sent alone"),
        "{mode}: {d}"
    );
    for id in ids {
        assert!(ids_with(&doc, "pass").contains(*id), "{mode} {id}: {doc:#}");
    }
}

/// A batch is judged in wire order: what follows a receipt in the same batch comes after it
/// (nothing "before ready"), and a push after a reduction receipt in the same batch is after
/// the reduction. The receipt inside the batch fails `transport.frames-valid` (JSON-RPC 2.0
/// §5), and only that.
#[test]
fn items_batched_after_a_receipt_are_judged_after_it() {
    passes_but_for_batched_answers(
        "receipt-batch",
        &[
            "policy.no-privileged-before-ready",
            "policy.reduction-respected",
            "push.feature-set-declared",
        ],
    );
    // A server that ignores a reduction also ignores the narrowed session that takes the
    // full grant back with a policy lacking `effectiveCapabilities` (§5.3): the narrowed
    // check fails there too.
    fails_exactly(
        "reduction-ignored-batch",
        &[
            "policy.reduction-respected",
            "grant.narrowed-respected",
            "transport.frames-valid",
        ],
    );
}

/// §6.5: a server-initiated message names its feature set. One whose `featureSet` is not a
/// string (the number 7) names none: it is outside every grant, so after the reduction
/// receipt it counts against `policy.reduction-respected`, beside `push.event-shape` (its
/// shape). Before, the judgement stopped at the non-string tag and only the shape check
/// failed.
#[test]
fn a_push_tagged_with_no_feature_set_name_after_a_reduction_is_outside_it() {
    // A server that ignores a reduction also ignores the narrowed session that takes the
    // full grant back with a policy lacking `effectiveCapabilities` (§5.3): the narrowed
    // check fails there too.
    let doc = fails_exactly(
        "reduction-untagged",
        &[
            "push.event-shape",
            "policy.reduction-respected",
            "grant.narrowed-respected",
        ],
    );
    let detail = doc["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["id"] == "policy.reduction-respected")
        .map(|c| c["detail"].to_string())
        .unwrap_or_default();
    assert!(detail.contains("names no feature set"), "{detail}");
}

/// §6.5, §6.7: a hook answer after the reduction receipt that injects under a `featureSet`
/// that is no string (the number 7) names no feature set, so none the reduction left
/// enabled: it counts against `policy.reduction-respected`, as a push or an inference
/// request so tagged does (one rule). Before, the reduction passed it ("none under a
/// disabled set").
#[test]
fn a_hook_answer_tagged_with_no_feature_set_name_after_a_reduction_is_outside_it() {
    // Its shape too, now that every hook answer is judged (`featureSet` 7 is no string).
    let doc = fails_exactly(
        "reduction-untagged-hook",
        &["policy.reduction-respected", "hooks.injection-shape"],
    );
    let d = detail(&doc, "policy.reduction-respected");
    assert!(
        d.contains("beforeInference injected 1 item(s) under a featureSet of type number"),
        "{d}"
    );
    assert!(d.contains("names no feature set"), "{d}");
}

#[test]
fn well_behaved_server_passes_every_check() {
    let (code, doc) = scripted("good");
    assert_complete(&doc);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(ids_with(&doc, "warn"), set(&[]), "{doc:#}");
    for id in [
        "initialize.mcpl-present",
        "initialize.version",
        "manifest.feature-set-count",
        "manifest.feature-sets-shape",
        "manifest.uses-valid",
        "manifest.identifier-charset",
        "manifest.revision-matches-digest",
        "policy.request-answered",
        "policy.receipt-shape",
        "policy.no-privileged-before-ready",
        "manifest.fetch",
        "rpc.unknown-method-errors",
        "hooks.answers-without-observe",
        "hooks.injection-positions",
        "hooks.injection-shape",
        "push.event-is-request",
        "push.event-shape",
        "inference.request-is-request",
        "inference.request-shape",
        "inference.feature-set-declared",
        "channels.descriptor-shape",
        "channels.incoming-is-request",
        "channels.list-answered",
        "channels.unknown-channel-error",
        "policy.reduction-answered",
        "policy.reduction-respected",
        "policy.notification-narrowing-respected",
        "policy.notification-not-ready",
        "policy.contradiction-rejected",
        "grant.messages-within-grant",
        "hooks.feature-set-declared",
        "channels.incoming-shape",
        "rpc.unknown-members-ignored",
        "state.rollback-unknown-checkpoint",
        "channels.close-unknown-error",
        "lifecycle.defensive",
        "hooks.no-inference-in-hook",
    ] {
        assert!(
            ids_with(&doc, "pass").contains(id),
            "{id} did not pass: {doc:#}"
        );
    }
    assert_eq!(code, 0);
    assert_eq!(doc["target"], format!("{FIXTURE} good"));
}

/// §8: a host MUST tolerate unknown response fields (MCP: a receiver ignores members it
/// does not know). A server as `good` but whose every result object, content block, hook
/// injection, request's params, channel descriptor and incoming message carries a member no
/// spec defines is judged exactly as `good`: nothing fails or warns, and every check `good`
/// passes passes.
#[test]
fn unknown_members_in_a_servers_answers_are_tolerated() {
    let (_, good) = scripted("good");
    let (code, doc) = scripted("extra-members");
    assert_complete(&doc);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(ids_with(&doc, "warn"), set(&[]), "{doc:#}");
    assert_eq!(ids_with(&doc, "pass"), ids_with(&good, "pass"), "{doc:#}");
    assert_eq!(code, 0);
}

/// Each misbehaviour fails exactly its checks (and the run still completes).
#[test]
fn misbehaving_servers_fail_exactly_the_right_checks() {
    let cases: &[(&str, &[&str])] = &[
        (
            "v04",
            &[
                "initialize.version",
                "manifest.feature-sets-shape",
                "policy.request-answered",
            ],
        ),
        ("mcp-only", &["initialize.mcpl-present"]),
        (
            "silent",
            &[
                "rpc.ping-answered",
                "rpc.unknown-method-errors",
                "manifest.fetch",
                "channels.list-answered",
                "channels.unknown-channel-error",
                "channels.close-unknown-error",
                "state.rollback-unknown-checkpoint",
            ],
        ),
        // A malformed receipt is not acceptance: what the server then sends as if ready is
        // sent outside a policy in force, and no feature set is available (§6.7).
        (
            "wrong-receipt",
            &[
                "policy.receipt-shape",
                "policy.no-privileged-unless-accepted",
                "push.feature-set-declared",
                "inference.feature-set-declared",
            ],
        ),
        // Refuses without a fallback, then (correctly) sends nothing privileged.
        ("refusal-no-fallback", &["policy.refusal-names-fallback"]),
        (
            "refusal-then-push",
            &[
                "policy.no-privileged-unless-accepted",
                "push.feature-set-declared",
            ],
        ),
        ("invented-mode", &["policy.no-invented-mode"]),
        ("early-push", &["policy.no-privileged-before-ready"]),
        // Pushed while the policy Request was pending: before ready, not the Notification's
        // doing.
        (
            "push-before-receipt",
            &["policy.no-privileged-before-ready"],
        ),
        ("bad-revision", &["manifest.revision-matches-digest"]),
        ("notify-push", &["push.event-is-request"]),
        ("bad-push-shape", &["push.event-shape"]),
        ("bad-injection", &["hooks.injection-positions"]),
        ("incoming-notification", &["channels.incoming-is-request"]),
        ("bad-descriptor", &["channels.descriptor-shape"]),
        ("changed-payload", &["manifest.changed-shape"]),
        (
            "changed-wrong-revision",
            &["manifest.changed-revision-matches"],
        ),
        // A malformed announced revision fails its shape once; the earlier, well-formed
        // announcement is not compared in its place (the host's rule, review of f779a0c).
        ("changed-malformed-revision", &["manifest.changed-shape"]),
        ("junk", &["transport.frames-valid"]),
        ("injection-no-feature-set", &["hooks.injection-shape"]),
        ("no-init", &["initialize.answered"]),
        ("notify-inference", &["inference.request-is-request"]),
        ("bad-inference", &["inference.request-shape"]),
        // §10.4 (F9): an empty namespace names nothing (the library host refuses it too).
        ("injection-empty-namespace", &["hooks.injection-shape"]),
        ("inference-undeclared", &["inference.feature-set-declared"]),
        ("unknown-channel-32004", &["channels.unknown-channel-error"]),
        ("list-no-array", &["channels.list-answered"]),
        ("reduction-unanswered", &["policy.reduction-answered"]),
        // It ignores the narrowed session's reduction too (a policy without
        // `effectiveCapabilities` after the full grant, §5.3).
        (
            "reduction-ignored",
            &["policy.reduction-respected", "grant.narrowed-respected"],
        ),
        ("unadvertised-register", &["grant.messages-within-grant"]),
        ("hook-undeclared-set", &["hooks.feature-set-declared"]),
        ("bad-incoming", &["channels.incoming-shape"]),
        ("accepts-contradiction", &["policy.contradiction-rejected"]),
        // It pushes on any Notification carrying a grant: on the widening one each narrowed
        // session sends once its policy is in force too (§6.7: discarded by a server).
        (
            "notification-ready",
            &[
                "policy.notification-not-ready",
                "grant.narrowed-respected",
                "featuresets.narrowed-respected",
            ],
        ),
        ("strict-members", &["rpc.unknown-members-ignored"]),
        ("close-32004", &["channels.close-unknown-error"]),
        ("lifecycle-crash", &["lifecycle.defensive"]),
        ("rollback-success", &["state.rollback-unknown-checkpoint"]),
        (
            "ignores-notification-narrowing",
            &["policy.notification-narrowing-respected"],
        ),
        (
            "changed-under-announced",
            &["manifest.changed-domains-match"],
        ),
    ];
    // Independent runs, each mostly waiting (`silent` and `v04` wait out a timeout per
    // unanswered request): a few at a time, each still judged as alone.
    concurrently(cases, |(mode, expected)| {
        fails_exactly(mode, expected);
    });
}

/// How many runs [`concurrently`] keeps going at once: a few, so that a loaded 2-core
/// machine (the test harness runs two tests at once too) still answers within `--timeout 1`.
const RUNS_AT_ONCE: usize = 3;

/// Calls `f` on every item, on [`RUNS_AT_ONCE`] threads; a panic (a failed assertion) in
/// any call fails the test once all have returned.
fn concurrently<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..RUNS_AT_ONCE {
            scope.spawn(|| {
                while let Some(item) =
                    items.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    f(item);
                }
            });
        }
    });
}

/// §6.5: an answer injecting under a `featureSet` that is no string fails
/// `hooks.injection-shape` saying so, with the value it gave; it was told "injections
/// returned without a featureSet", as if it had named none.
#[test]
fn s6_5_a_feature_set_that_is_no_string_is_called_so() {
    let doc = fails_exactly("injection-feature-set-number", &["hooks.injection-shape"]);
    let d = detail(&doc, "hooks.injection-shape");
    assert!(d.contains("featureSet 5 is not a string"), "{d}");
    assert!(!d.contains("without a featureSet"), "{d}");
}

/// §14.2: a descriptor's `id` is unique within the connection, and §14.5's per-descriptor
/// results key on it, so one message naming an id twice leaves the host's answer ambiguous.
/// `channels.descriptor-shape` judged each descriptor alone and passed both; the defect has
/// its own check, whatever the message (`channels/register`, `channels/changed`'s `added`).
#[test]
fn s14_2_a_channel_id_named_twice_in_one_message_fails_ids_unique() {
    for mode in ["duplicate-channel-id", "changed-duplicate-id"] {
        let doc = fails_exactly(mode, &["channels.ids-unique"]);
        let d = detail(&doc, "channels.ids-unique");
        assert!(d.contains("twice"), "{mode}: {d}");
    }
    // No descriptor at all: nothing to judge, like its siblings.
    let (_, doc) = scripted("mcp-only");
    assert_eq!(
        doc["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == "channels.ids-unique"))
            .map(|c| c["status"].clone()),
        Some(Value::from("skip")),
        "{doc:#}"
    );
}

/// §14.2: a channel's `id` is unique within the connection, not only within one message.
/// A server registering `demo:#general` and, later in the connection, registering it again
/// as another descriptor (or adding it in a `channels/changed`, where an update belongs in
/// `updated`) names two channels by one id; neither was caught, as `channels.ids-unique`
/// judged each message alone. Now both fail it. The same descriptor registered again names
/// one channel, and an id removed (`channels/changed`) or closed (`channels/close`,
/// `closed: true`) may be registered anew: these pass.
#[test]
fn s14_2_a_channel_id_registered_again_later_in_the_connection_fails_ids_unique() {
    for mode in ["reregister-id", "changed-adds-registered"] {
        let doc = fails_exactly(mode, &["channels.ids-unique"]);
        let d = detail(&doc, "channels.ids-unique");
        assert!(
            d.contains("demo:#general") && d.contains("already registered"),
            "{mode}: {d}"
        );
    }
    for mode in ["reregister-same", "reregister-after-remove"] {
        let (code, doc) = scripted(mode);
        assert_eq!(ids_with(&doc, "fail"), set(&[]), "{mode}: {doc:#}");
        assert_eq!(code, 0, "{mode}");
    }
    let scenario = common::temp_file(
        "reregister-after-close.json",
        r#"[ { "close": "demo:#general" }, { "sleep": 0.2 } ]"#,
    );
    let (_, doc) = check(&[
        "--scenario",
        &scenario,
        "--",
        FIXTURE,
        "reregister-after-close",
    ]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    let steps = doc["scenario"].as_array().expect("scenario steps");
    assert!(
        steps[0]["outcome"]
            .as_str()
            .unwrap_or_default()
            .contains(r#""closed":true"#),
        "{doc:#}"
    );
}

/// F9: a push tagged `chat:mention` and `chat:ambient` (§16.3: producers SHOULD NOT) and an
/// `inference/request` with `messages: []` (§11.2 sets no length; nothing to answer) passed
/// every check. Each now warns, naming why; neither fails anything.
#[test]
fn f9_ambient_beside_addressed_and_empty_messages_warn() {
    for (mode, id, said) in [
        ("ambient-push", "tags.ambient-not-addressed", "chat:ambient"),
        (
            "inference-no-messages",
            "inference.request-shape",
            "messages is empty",
        ),
    ] {
        let (_, doc) = scripted(mode);
        assert!(ids_with(&doc, "warn").contains(id), "{mode}: {doc:#}");
        assert!(detail(&doc, id).contains(said), "{mode}: {doc:#}");
        assert_eq!(ids_with(&doc, "fail"), set(&[]), "{mode}: {doc:#}");
    }
}

/// §14.5 (F8b): a server that removes `demo:#general` with `channels/changed {removed}` and
/// then sends `channels/incoming` for it, or sends one for a channel it never registered,
/// had its message refused `unknown_channel` by the strict host and passed every check. Now
/// `channels.incoming-registered` warns naming the message; the well-behaved fixture passes it.
#[test]
fn s14_5_incoming_for_a_channel_not_registered_warns() {
    let id = "channels.incoming-registered";
    for mode in ["removed-then-incoming", "incoming-never-registered"] {
        let (_, doc) = scripted(mode);
        assert!(ids_with(&doc, "warn").contains(id), "{mode}: {doc:#}");
        let d = detail(&doc, id);
        assert!(d.contains("m1") && d.contains("§14.5"), "{mode}: {d}");
        assert_eq!(ids_with(&doc, "fail"), set(&[]), "{mode}: {doc:#}");
    }
    let (_, doc) = scripted("good");
    assert!(ids_with(&doc, "pass").contains(id), "{doc:#}");
}

/// §4.1's Direction column: `context/beforeInference` and `channels/publish` are the host's
/// to send. A server sending them to its host was answered `-32601` and passed every check
/// (both are MCPL 0.5 methods, so `rpc.methods-in-vocabulary` passed too); it now fails
/// `rpc.methods-direction`, naming them. The well-behaved fixture passes it.
#[test]
fn s4_1_a_server_sending_the_hosts_methods_fails_methods_direction() {
    let doc = fails_exactly("wrong-direction", &["rpc.methods-direction"]);
    let d = detail(&doc, "rpc.methods-direction");
    for said in ["context/beforeInference", "channels/publish", "§4.1"] {
        assert!(d.contains(said), "{said}: {d}");
    }
    let (_, doc) = scripted("good");
    assert_eq!(
        doc["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == "rpc.methods-direction"))
            .map(|c| c["status"].clone()),
        Some(Value::from("pass")),
        "{doc:#}"
    );
}

/// §5.3's pinned field semantics and §5.4's matching, as live servers misread them
/// (AUDIT-001): a policy Request without `effectiveCapabilities` taken as "no change",
/// `contextHooks.*` and a bare `channels` taken as subtrees, `deniedCapabilities` taken as
/// the authority, `enabled` ignored. Each such server passed every check (no session spelt
/// the policy those ways); each now fails the narrowed check of the session that does,
/// and nothing else. The well-behaved fixture passes those sessions.
#[test]
fn s5_3_s5_4_policy_spellings_live_servers_misread_fail_the_narrowed_checks() {
    let cases = [
        (
            "misreads-absent",
            "grant.narrowed-respected",
            "effectiveCapabilities absent",
        ),
        (
            "misreads-wildcards",
            "grant.narrowed-respected",
            "contextHooks.* and channels listed",
        ),
        (
            "denied-as-authority",
            "grant.narrowed-respected",
            "nothing granted",
        ),
        (
            "ignores-enabled",
            "featuresets.narrowed-respected",
            "enabled",
        ),
    ];
    for (mode, id, session) in cases {
        let doc = fails_exactly(mode, &[id]);
        let d = detail(&doc, id);
        assert!(d.contains(session), "{mode}: {d}");
    }
    // §6.7: the reduction binds the host first, whatever the answer. A server refusing the
    // absent form with an error and going on under the full grant fails the narrowed
    // check too, beside the reduction's answer and its shape (it passed the narrowed
    // check before: the checker kept the full grant after a refused reduction).
    let doc = fails_exactly(
        "refuses-absent",
        &[
            "grant.narrowed-respected",
            "policy.reduction-answered",
            "policy.receipt-shape",
        ],
    );
    assert!(detail(&doc, "grant.narrowed-respected").contains("effectiveCapabilities absent"));
    let (code, doc) = scripted("good");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(code, 0);
    let labels: Vec<&str> = doc["sessions"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["label"].as_str()).collect())
        .unwrap_or_default();
    for want in ["effectiveCapabilities absent", "channels listed", "enabled"] {
        assert!(
            labels.iter().any(|l| l.contains(want)),
            "{want}: {labels:?}"
        );
    }
}

/// §14.3: `channels/list` lists the channels known on the connection. A stub answering `[]`
/// although the server registered `demo:#general` (and the host accepted it) passed
/// `channels.list-answered` ("listed 0 channel(s)"); it now warns there, naming the channel
/// left out. The well-behaved fixture lists it and passes.
#[test]
fn s14_3_a_channel_list_leaving_out_a_registered_channel_warns() {
    let (code, doc) = scripted("list-stub");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(
        ids_with(&doc, "warn"),
        set(&["channels.list-answered"]),
        "{doc:#}"
    );
    let d = detail(&doc, "channels.list-answered");
    assert!(
        d.contains("demo:#general") && d.contains("leaving out"),
        "{d}"
    );
    assert_eq!(code, 0);
}

/// §14.1 names `channels/acknowledge` and `channels/typing` but SPEC.md gives them no
/// direction (the library reads them as the host's). A server sending them failed
/// `rpc.methods-direction` with a detail citing a §4.1 rule that does not exist; it now
/// warns there, saying the direction is the library's reading, and fails nothing.
#[test]
fn s14_1_acknowledge_and_typing_from_the_server_warn_not_fail() {
    let (code, doc) = scripted("ack-typing");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert!(
        ids_with(&doc, "warn").contains("rpc.methods-direction"),
        "{doc:#}"
    );
    let d = detail(&doc, "rpc.methods-direction");
    for said in [
        "channels/acknowledge",
        "channels/typing",
        "SPEC.md gives no direction",
    ] {
        assert!(d.contains(said), "{said}: {d}");
    }
    assert!(!d.contains("§4.1 has only"), "{d}");
    assert_eq!(code, 0, "a warning alone exits 0");
}

/// MCP (which §4 carries MCPL over): "The request ID MUST NOT have been previously used by
/// the requestor within the same session". A server sending two `push/event`s under one id
/// (`s-push`) passed every check; it now warns under `rpc.request-ids-unique`, naming the
/// id. The fixture's other modes send a fresh id each time, and pass it.
#[test]
fn mcp_a_request_id_reused_within_the_session_warns() {
    let (code, doc) = scripted("reused-ids");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(
        ids_with(&doc, "warn"),
        set(&["rpc.request-ids-unique"]),
        "{doc:#}"
    );
    let d = detail(&doc, "rpc.request-ids-unique");
    assert!(d.contains("s-push") && d.contains("MCP"), "{d}");
    assert_eq!(code, 0);
    let (_, doc) = scripted("good");
    assert_eq!(ids_with(&doc, "warn"), set(&[]), "{doc:#}");
}

/// MCP's base protocol: an id is not reused while its request is in flight. The same two
/// pushes under `s-push` in one batch (the first unanswered when the second is read) fail
/// `rpc.in-flight-ids-unique`, beside `rpc.request-ids-unique`'s warning; the second sent
/// once the first's answer was read (`reused-ids`, above) they only warn (two written back
/// to back, both read before either answer is written, are in flight: `check_wire`).
#[test]
fn mcp_a_request_id_reused_in_flight_fails() {
    let doc = fails_exactly("reused-ids-in-flight", &["rpc.in-flight-ids-unique"]);
    assert!(
        ids_with(&doc, "warn").contains("rpc.request-ids-unique"),
        "{doc:#}"
    );
    let d = detail(&doc, "rpc.in-flight-ids-unique");
    assert!(d.starts_with("1 of ") && d.contains("s-push"), "{d}");
}

/// §6.6: a request bearing an id is answered, never met with silence. The checker fences its
/// listening windows with `ping`s whose answers it does not judge, so a server that ignored
/// every `ping` and answered all else got a clean report (exit 0). Its own check now.
#[test]
fn s6_6_a_server_that_never_answers_ping_fails_ping_answered() {
    let doc = fails_exactly("no-ping", &["rpc.ping-answered"]);
    assert!(
        detail(&doc, "rpc.ping-answered").contains("no response"),
        "{doc:#}"
    );
}

/// MCP answers `ping` with an empty result, an object: a server answering `"pong"`, which a
/// host decoding MCP's empty result (the library's `Ping`) cannot read, passed
/// `rpc.ping-answered` as any result did. It now warns, quoting the result, as an error does.
#[test]
fn a_ping_answered_with_a_result_that_is_no_object_warns() {
    let (code, doc) = check(&["--quick", "--", FIXTURE, "ping-pong"]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(
        ids_with(&doc, "warn"),
        set(&["rpc.ping-answered"]),
        "{doc:#}"
    );
    let d = detail(&doc, "rpc.ping-answered");
    assert!(d.contains("\"pong\""), "{d}");
    assert_eq!(code, 0);
}

/// `oversized` writes a 16 MiB line in every session; one session shows its defect (and
/// that the connection survives it) without nine processes writing 144 MiB at once.
fn oversized() -> (i32, Value) {
    check(&["--quick", "--", FIXTURE, "oversized"])
}

#[test]
fn an_oversized_line_fails_only_frames_valid() {
    let (code, doc) = oversized();
    assert_complete(&doc);
    assert_eq!(
        ids_with(&doc, "fail"),
        set(&["transport.frames-valid"]),
        "{doc:#}"
    );
    assert_eq!(code, 1);
}

/// §5.3/§6.7: after a refusal or a malformed receipt the server is not operating under the
/// policy; a privileged message then is judged (and the strict host refused it, -32002),
/// not skipped as if no grant were known.
#[test]
fn s6_7_privileged_messages_after_a_refused_or_malformed_receipt_fail() {
    let id = "policy.no-privileged-unless-accepted";
    let status = |doc: &Value, id: &str| -> (String, String) {
        let c = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {doc:#}"));
        (
            c["status"].as_str().unwrap().to_owned(),
            c["detail"].as_str().unwrap().to_owned(),
        )
    };
    let (_, doc) = scripted("refusal-then-push");
    let (st, detail) = status(&doc, id);
    assert_eq!(st, "fail", "{doc:#}");
    assert!(
        detail.contains("refusal") && detail.contains("push/event"),
        "{detail}"
    );
    let (st, detail) = status(&doc, "push.feature-set-declared");
    assert_eq!(st, "fail", "{doc:#}");
    assert!(detail.contains("not available"), "{detail}");
    assert_eq!(status(&doc, "grant.messages-within-grant").0, "skip");
    let (_, doc) = scripted("wrong-receipt");
    let (st, detail) = status(&doc, id);
    assert_eq!(st, "fail", "{doc:#}");
    assert!(detail.contains("malformed receipt"), "{detail}");
    // A refusal followed by nothing privileged conforms.
    let (_, doc) = scripted("refusal-no-fallback");
    assert_eq!(status(&doc, id).0, "pass", "{doc:#}");
    // An accepted policy leaves nothing to judge here.
    let (_, doc) = scripted("good");
    assert_eq!(status(&doc, id).0, "skip", "{doc:#}");
}

/// An over-long line is discarded by the transport and reported; the run goes on.
#[test]
fn oversized_line_fails_frames_valid_and_the_connection_survives() {
    let (code, doc) = oversized();
    let frames = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "transport.frames-valid")
        .unwrap();
    assert_eq!(frames["status"], "fail", "{doc:#}");
    assert!(
        frames["detail"]
            .as_str()
            .unwrap()
            .contains("exceeds the 16777216-byte limit"),
        "{frames}"
    );
    for id in ["policy.request-answered", "rpc.unknown-method-errors"] {
        assert!(ids_with(&doc, "pass").contains(id), "{id}: {doc:#}");
    }
    assert_eq!(code, 1);
}

#[test]
fn s3_3_mcp_only_server_skips_mcpl_checks_with_a_reason() {
    let (_, doc) = scripted("mcp-only");
    let checks = doc["checks"].as_array().unwrap();
    let version = checks
        .iter()
        .find(|c| c["id"] == "initialize.version")
        .unwrap();
    assert_eq!(version["status"], "skip");
    assert!(version["detail"].as_str().unwrap().contains("§3.3"));
    assert!(ids_with(&doc, "pass").contains("rpc.unknown-method-errors"));
}

/// An `initialize` result that is no object with a `capabilities` object (MCP) is not an
/// MCP-only server: a host refuses it outright. `initialize.mcpl-present` fails saying so,
/// not "an MCP-only server (§3.3)".
#[test]
fn an_initialize_result_without_capabilities_is_not_called_mcp_only() {
    let (code, doc) = scripted("string-init");
    assert_complete(&doc);
    assert_eq!(code, 1);
    let present = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "initialize.mcpl-present")
        .unwrap();
    assert_eq!(present["status"], "fail");
    let detail = present["detail"].as_str().unwrap();
    assert!(detail.contains("no capabilities object"), "{detail}");
    assert!(!detail.contains("an MCP-only server (§3.3)"), "{detail}");
}

/// JSON-RPC 2.0 answers requests, never responses: a malformed response (here to
/// `initialize`, with a `result` and an `error` both) fails `transport.frames-valid` and is
/// not answered. The checker had answered it `-32600` under its id, and a server that takes
/// every message with an id for a request answered that with `-32601`, which the checker
/// then read as its answer to `initialize`.
#[test]
fn a_malformed_response_is_not_answered() {
    let (code, doc) = check(&["--quick", "--", FIXTURE, "both-init"]);
    assert_eq!(code, 1, "{doc:#}");
    assert!(
        detail(&doc, "transport.frames-valid").contains("both result and error"),
        "{doc:#}"
    );
    let init = detail(&doc, "initialize.answered");
    assert!(!init.contains("-32601"), "{init}");
    // Said as what it is, at once: not waited out and reported as silence.
    assert!(init.contains("invalid response"), "{init}");
    assert!(!init.contains("no response within"), "{init}");
}

#[test]
fn server_that_never_answers_initialize_gets_a_complete_report() {
    let (code, doc) = scripted("no-init");
    assert_complete(&doc);
    assert_eq!(code, 1);
    assert_eq!(doc["summary"]["fail"], 1);
    assert_eq!(
        doc["summary"]["skip"].as_u64().unwrap() + 1,
        doc["checks"].as_array().unwrap().len() as u64
    );
}

/// A server that floods notifications instead of answering `initialize`: the failure said
/// only "no response within the timeout", as for a server that sent nothing, though what
/// it sent instead is what a reader needs to tell a flood from a hang. What came meanwhile
/// is counted and the last method named (those frames are no answer).
#[test]
fn a_flood_instead_of_an_initialize_answer_is_said() {
    let doc = fails_exactly("flood-no-init", &["initialize.answered"]);
    let d = detail(&doc, "initialize.answered");
    assert!(d.contains("no response within the timeout"), "{d}");
    assert!(d.contains("meanwhile it sent"), "{d}");
    assert!(d.contains("notifications/message"), "{d}");
}

#[test]
fn exit_2_when_the_command_does_not_exist() {
    let (code, doc) = check(&["--", "/nonexistent/mcpl-no-such-server"]);
    assert_eq!(code, 2);
    let error = doc["error"].as_str().unwrap();
    assert!(error.contains("cannot start"), "{error}");
    // Named once: the library's spawn error names the program itself.
    assert_eq!(
        error.matches("/nonexistent/mcpl-no-such-server").count(),
        1,
        "{error}"
    );
    assert_complete(&doc);
    assert_eq!(doc["summary"]["fail"], 0);
}

#[test]
fn exit_2_on_an_unusable_timeout() {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--json", "--timeout", "0", "--", FIXTURE, "good"])
        .timeout(GUARD)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeout"));
}

#[test]
fn exit_2_when_nobody_listens_on_the_tcp_port() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // listener dropped: nothing listens there now
    let (code, doc) = check(&[&format!("tcp://127.0.0.1:{port}")]);
    assert_eq!(code, 2, "{doc:#}");
    assert!(doc["error"].as_str().unwrap().contains("cannot connect"));
}

/// Serves every TCP connection on `listener` (each session of a run dials again) by
/// bridging each to a fresh `good` fixture's stdio; with `once`, only the first.
fn bridge_tcp_connections(listener: TcpListener, once: bool) {
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { break };
            std::thread::spawn(move || bridge_tcp_connection(sock));
            if once {
                // Keeps the listener open but accepts nothing more: a later session's
                // dial is queued and never answered.
                std::thread::park();
            }
        }
    });
}

/// Bridges one TCP connection to a fresh `good` fixture's stdio.
fn bridge_tcp_connection(sock: std::net::TcpStream) {
    // Each line goes out at once: Nagle's algorithm held the second small write of a line
    // (its newline) for the checker's delayed ACK, 40 ms a message.
    let _ = sock.set_nodelay(true);
    let mut child = StdCommand::new(FIXTURE)
        .arg("good")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let from_child = child.stdout.take().unwrap();
    let mut sock_w = sock.try_clone().unwrap();
    let up = std::thread::spawn(move || {
        for line in BufReader::new(from_child).lines() {
            let Ok(line) = line else { break };
            if writeln!(sock_w, "{line}").is_err() {
                break;
            }
        }
    });
    for line in BufReader::new(sock).lines() {
        let Ok(line) = line else { break };
        if writeln!(to_child, "{line}").is_err() {
            break;
        }
    }
    drop(to_child);
    let _ = child.wait();
    let _ = up.join();
}

#[test]
fn tcp_target_is_checked_like_stdio() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    bridge_tcp_connections(listener, false);
    let (code, doc) = check(&[&format!("tcp://127.0.0.1:{port}")]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(code, 0);
    // Every session re-dialled the address and ran.
    let sessions = doc["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 12, "{doc:#}");
    assert!(sessions.iter().all(|s| s.get("error").is_none()), "{doc:#}");
}

/// An address that takes no second connection: the first session's verdicts stand, the
/// next session reports that it could not start, and no further session is tried.
#[test]
fn a_target_that_takes_one_connection_ends_the_sessions_with_an_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    bridge_tcp_connections(listener, true);
    let (code, doc) = check(&[&format!("tcp://127.0.0.1:{port}")]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(code, 0);
    let sessions = doc["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{doc:#}");
    let error = sessions[1]["error"].as_str().unwrap();
    assert!(error.contains("initialize"), "{error}");
}

/// `mcpl check tcp://HOST:PORT --json …`: options after an address are options, not the
/// words of a command (a command comes only after `--`).
#[test]
fn options_after_an_address_target_are_options() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    bridge_tcp_connections(listener, false);
    let url = format!("tcp://127.0.0.1:{port}");
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", &url, "--json", "--timeout", "1", "--watch", "0"])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("--json ignored ({e}): {:?}", out.stdout));
    assert_eq!(doc["target"], url.as_str(), "{doc:#}");
    assert!(doc.get("error").is_none(), "{doc:#}");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(out.status.code(), Some(0));
}

/// Words after an address are refused (exit 2), never run as a command; so is an address
/// given together with `-- CMD`.
#[test]
fn exit_2_when_an_address_is_followed_by_words_or_a_command() {
    for args in [
        &["tcp://127.0.0.1:9", "extra"][..],
        &["tcp://127.0.0.1:9", "--", FIXTURE, "good"][..],
    ] {
        let (code, doc) = check(args);
        assert_eq!(code, 2, "{args:?}: {doc:#}");
        let error = doc["error"].as_str().unwrap();
        assert!(!error.contains("cannot start"), "{error}");
        assert!(error.contains("--"), "{error}");
    }
}

/// `--ca` is refused (exit 2) for a target without TLS instead of being silently ignored.
#[test]
fn exit_2_when_ca_is_given_for_a_target_without_tls() {
    for target in [&["tcp://127.0.0.1:9"][..], &["--", FIXTURE, "good"][..]] {
        let mut args = vec!["--ca", "/nonexistent/ca.pem"];
        args.extend_from_slice(target);
        let (code, doc) = check(&args);
        assert_eq!(code, 2, "{target:?}: {doc:#}");
        assert!(doc["error"].as_str().unwrap().contains("--ca"), "{doc:#}");
        assert_eq!(doc["summary"]["fail"], 0);
    }
}

/// Runs a quick check of `mode` with a transcript; its report and every message the strict
/// host sent.
fn quick_sent(mode: &str) -> (Value, Vec<Value>) {
    let dir = std::env::temp_dir().join(format!("mcpl-check-{mode}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.jsonl");
    let (_, doc) = check(&[
        "--quick",
        "--transcript",
        path.to_str().unwrap(),
        "--",
        FIXTURE,
        mode,
    ]);
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let sent = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["direction"] == "sent")
        .map(|l| l["message"].clone())
        .collect();
    (doc, sent)
}

/// Runs a quick check of `mode` with a transcript; its report and what the strict host
/// sent in answer to the server's request `id`.
fn quick_answer_to(mode: &str, id: &str) -> (Value, Value) {
    let (doc, sent) = quick_sent(mode);
    let answer = sent
        .into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} is answered"));
    (doc, answer)
}

/// §16.6: admission is decided before tags are read. A push whose only defect is a bare tag
/// fails `push.event-shape` (§16.1), but the strict host, answering by the library host's
/// rule (`mcpl::protocol::push::push_event_defects`), admits it; it used to answer `-32602`.
/// The detail cites §16.1 once: the library's tag error already names it, and the checker
/// appended it again (`… (§16.1) (§16.1)`).
#[test]
fn s16_6_a_bad_tag_fails_the_shape_check_but_does_not_refuse_the_push() {
    let (doc, answer) = quick_answer_to("bare-tag-push", "s-push");
    assert_eq!(
        ids_with(&doc, "fail"),
        set(&["push.event-shape"]),
        "{doc:#}"
    );
    let detail = doc["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["id"] == "push.event-shape")
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_default();
    assert!(detail.contains("not namespaced"), "{detail}");
    assert_eq!(detail.matches("§16.1").count(), 1, "{detail}");
    assert_eq!(
        answer["result"],
        serde_json::json!({ "accepted": true }),
        "{answer}"
    );
}

/// §14.3: the strict host refuses a malformed `channels/incoming` message item-wise as the
/// library host does (`invalid_message`, -32602); it used to accept any message naming a
/// registered channel, a messageId or not.
#[test]
fn s14_3_the_strict_host_refuses_a_malformed_incoming_message_like_the_host() {
    let (doc, answer) = quick_answer_to("bad-incoming", "s-incoming");
    assert_eq!(
        ids_with(&doc, "fail"),
        set(&["channels.incoming-shape"]),
        "{doc:#}"
    );
    assert_eq!(
        answer["result"]["results"][0],
        serde_json::json!({ "messageId": null, "accepted": false,
                            "reason": "invalid_message", "code": -32602 }),
        "{answer}"
    );
}

/// §4.1: `channels/register` is a Request. Sent as a Notification it fails
/// `channels.register-is-request`, and the strict host does not apply it, as the library
/// host does not (`protocol::Kind::takes`): the server's `channels/incoming` on the channel
/// it named is refused `-32023` (§14.6), where the strict host had registered the channel.
#[test]
fn s4_1_a_register_notification_is_not_applied_by_the_strict_host() {
    let (doc, answer) = quick_answer_to("register-notification", "s-incoming");
    assert!(
        ids_with(&doc, "fail").contains("channels.register-is-request"),
        "{doc:#}"
    );
    assert_eq!(
        answer["result"]["results"][0]["code"],
        serde_json::json!(-32023),
        "{answer}"
    );
}

/// JSON-RPC 2.0 §5: a request whose id cannot be used (`null`, `1e30`, an object) fails
/// `transport.frames-valid` and is answered `-32600` with `id: null`, as the library's peer
/// answers it; the strict host had left it unanswered.
#[test]
fn a_request_whose_id_cannot_be_used_is_answered_with_a_null_id() {
    let (doc, sent) = quick_sent("odd-ids");
    assert!(
        ids_with(&doc, "fail").contains("transport.frames-valid"),
        "{doc:#}"
    );
    let refused: Vec<&Value> = sent
        .iter()
        .filter(|m| m.get("id") == Some(&Value::Null) && m["error"]["code"] == -32600)
        .collect();
    assert_eq!(refused.len(), 3, "{sent:#?}");
}

#[test]
fn transcript_is_valid_json_lines_of_every_frame() {
    let dir = std::env::temp_dir().join(format!("mcpl-check-transcript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.jsonl");
    let (code, _) = check(&[
        "--transcript",
        path.to_str().unwrap(),
        "--",
        FIXTURE,
        "good",
    ]);
    assert_eq!(code, 0);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for l in &lines {
        assert!(
            ["sent", "received"].contains(&l["direction"].as_str().unwrap()),
            "{l}"
        );
        assert!(l["time"].as_str().unwrap().ends_with('Z'));
        assert!(l["message"].is_object(), "{l}");
    }
    let sent: Vec<&str> = lines
        .iter()
        .filter(|l| l["direction"] == "sent")
        .filter_map(|l| l["message"]["method"].as_str())
        .collect();
    // A quiet window, the grant as a Notification (§6.7 probe) and a second window, each
    // opened and closed by a ping, then the policy Request.
    assert_eq!(
        &sent[..8],
        &[
            "initialize",
            "notifications/initialized",
            "ping",
            "ping",
            "featureSets/update",
            "ping",
            "ping",
            "featureSets/update"
        ]
    );
    let updates: Vec<&Value> = lines
        .iter()
        .filter(|l| l["direction"] == "sent" && l["message"]["method"] == "featureSets/update")
        .collect();
    assert!(updates[0]["message"].get("id").is_none(), "{}", updates[0]);
    // The policy Request carries the grant: everything advertised except observe (§10.1).
    let update = updates[1];
    assert!(update["message"].get("id").is_some(), "{update}");
    let effective = update["message"]["params"]["effectiveCapabilities"]
        .as_array()
        .unwrap();
    assert!(!effective
        .iter()
        .any(|c| c == "contextHooks.beforeInference.observe"));
    assert!(effective.iter().any(|c| c == "pushEvents"));
    // The strict host answered the server's push/event with an accepted result.
    assert!(lines.iter().any(|l| l["direction"] == "sent"
        && l["message"]["id"] == "s-push"
        && l["message"]["result"]["accepted"] == true));
    let received = lines
        .iter()
        .filter(|l| l["direction"] == "received")
        .count();
    assert!(received >= 7, "{received}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn text_report_lists_failures_and_list_prints_the_catalogue() {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args([
            "check",
            "--timeout",
            "1",
            "--watch",
            "0",
            "--",
            FIXTURE,
            "early-push",
        ])
        .timeout(GUARD)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("failed: policy.no-privileged-before-ready"),
        "{text}"
    );
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("push.event-shape"));
}

/// Forwards every frame between two transports until either side ends.
async fn bridge(a: mcpl::transport::Transport, b: mcpl::transport::Transport) {
    use mcpl::transport::Frame;
    let (mut ar, mut aw, mut br, mut bw) = (a.reader, a.writer, b.reader, b.writer);
    let _guards = (a.guard, b.guard);
    loop {
        tokio::select! {
            f = ar.next_frame() => match f {
                Ok(Some(Frame::Text(t))) => { if bw.send(&t).await.is_err() { break } }
                _ => break,
            },
            f = br.next_frame() => match f {
                Ok(Some(Frame::Text(t))) => { if aw.send(&t).await.is_err() { break } }
                _ => break,
            },
        }
    }
}

#[test]
fn ws_target_is_checked_like_stdio() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(mcpl::transport::ws::Listener::bind("127.0.0.1:0", None))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(serve_ws(listener));
    let (code, doc) = check(&[&format!("ws://127.0.0.1:{port}/")]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(code, 0);
}

/// Bridges every WebSocket connection `listener` accepts (each session dials again) to a
/// fresh `good` fixture; a connection whose handshake fails is skipped.
async fn serve_ws(listener: mcpl::transport::ws::Listener) {
    loop {
        let Ok((ws, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut cmd = tokio::process::Command::new(FIXTURE);
            cmd.arg("good");
            let (child, _control) = mcpl::transport::child::spawn(&mut cmd).unwrap();
            bridge(ws, child).await;
        });
    }
}

#[test]
fn wss_target_trusts_only_the_bundled_roots_or_the_ca_flag() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = std::env::temp_dir().join(format!("mcpl-check-wss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, certified.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
    let server_config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(mcpl::transport::ws::Listener::bind(
            "127.0.0.1:0",
            Some(std::sync::Arc::new(server_config)),
        ))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    // The first connection (no --ca) fails its TLS handshake; the next ones are served.
    rt.spawn(serve_ws(listener));
    // Untrusted certificate (not under the bundled roots): the target cannot be reached.
    let (code, doc) = check(&[&format!("wss://localhost:{port}/")]);
    assert_eq!(code, 2, "{doc:#}");
    let (code, doc) = check(&[
        "--ca",
        ca.to_str().unwrap(),
        &format!("wss://localhost:{port}/"),
    ]);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(code, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With no target, `mcpl check` spawns `mcpl serve --stdio`, calls the tools that make it
/// announce a manifest change, deliver a channel message and ask the host's model (its
/// default scenario), and a correct server passes. The pass and skip sets are exact: a
/// reference server that stopped pushing, registering or injecting would turn required
/// checks into skips, which must not go unnoticed. The only skips are the refusal path,
/// which a server that accepts every policy never takes.
#[test]
fn reference_server_passes_every_check() {
    let (code, doc) = check(&[]);
    assert_complete(&doc);
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(ids_with(&doc, "warn"), set(&[]), "{doc:#}");
    assert_eq!(
        ids_with(&doc, "pass"),
        set(&[
            "transport.frames-valid",
            // Every object of every frame names each member once (RFC 8259 §4, I-JSON).
            "transport.member-names-unique",
            "initialize.answered",
            "initialize.mcpl-present",
            "initialize.version",
            "initialize.advertisement-shape",
            // Issue #20: within the 1,024 feature sets a library host reads.
            "manifest.feature-set-count",
            "manifest.feature-sets-shape",
            "manifest.uses-valid",
            "manifest.identifier-charset",
            "manifest.revision-matches-digest",
            // RFC-001 §5.1: its tag descriptors use named facets (issue #21: `origin`).
            "manifest.tag-facets",
            "manifest.tag-ontology",
            "policy.request-answered",
            "policy.receipt-shape",
            "policy.no-invented-mode",
            "policy.no-privileged-before-ready",
            // §6.7: the library server answers a reduction and drops injections under the
            // sets it disabled (exercised through beforeInference, which needs no watch).
            "policy.reduction-answered",
            "policy.reduction-respected",
            "policy.notification-not-ready",
            "policy.notification-narrowing-respected",
            "policy.contradiction-rejected",
            // The library derives its receipts (§6.4, §6.7), and it keeps to each narrowed
            // grant of sessions 2 and later.
            "policy.receipt-matches-derivation",
            "grant.messages-within-grant",
            "grant.narrowed-respected",
            "featuresets.narrowed-respected",
            "manifest.fetch",
            "rpc.unknown-method-errors",
            // §6.6: its ping is answered.
            "rpc.ping-answered",
            "rpc.unknown-members-ignored",
            "rpc.methods-in-vocabulary",
            // §4.1: it sends only the methods a server sends.
            "rpc.methods-direction",
            // MCP: each of its requests has an id of its own.
            "rpc.request-ids-unique",
            "rpc.in-flight-ids-unique",
            // JSON-RPC 2.0 §5: each of its responses answers a request of the checker's.
            "rpc.responses-answer-requests",
            "lifecycle.defensive",
            "hooks.answers-without-observe",
            "hooks.injection-positions",
            "hooks.injection-shape",
            "hooks.feature-set-declared",
            // §10.7: its hook answers without asking for inference first.
            "hooks.no-inference-in-hook",
            // Its ready-time push/event (ref.events) and channels/register (ref.chat).
            "push.event-is-request",
            "push.event-shape",
            "push.feature-set-declared",
            "featuresets.declaration-matches",
            "channels.descriptor-shape",
            // §14.2: no channel id named twice in one message.
            "channels.ids-unique",
            "channels.register-is-request",
            "channels.list-answered",
            "channels.unknown-channel-error",
            // What its default scenario's tool calls start: add_topic, say, ask.
            "manifest.changed-shape",
            "manifest.changed-is-notification",
            "manifest.changed-revision-matches",
            "manifest.changed-domains-match",
            "channels.incoming-is-request",
            "channels.incoming-shape",
            "channels.incoming-registered",
            "tags.ambient-not-addressed",
            "inference.request-is-request",
            "inference.request-shape",
            "inference.feature-set-declared",
            // ref.notes declares rollback; ref.chat advertises channels.lifecycle.
            "state.rollback-unknown-checkpoint",
            "channels.close-unknown-error",
        ]),
        "{doc:#}"
    );
    // The refusal path, which the reference server never takes, and what it never sends.
    assert_eq!(
        ids_with(&doc, "skip"),
        set(&[
            "policy.refusal-names-fallback",
            "policy.no-privileged-unless-accepted",
            // It sends no notification-only method but mcpl/manifestChanged (§4.1).
            "rpc.notifications-have-no-id",
            // Its manifest change (add_topic) revokes nothing (§17.5 step 3).
            "manifest.revocation-answered",
        ]),
        "{doc:#}"
    );
    let facets = doc["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "manifest.tag-facets"))
        .map(|c| c["detail"].as_str().unwrap_or_default().to_owned());
    assert!(
        facets
            .as_deref()
            .is_some_and(|d| !d.contains("unnamed_facet")),
        "{facets:?}"
    );
    assert_eq!(doc["scenario"].as_array().map(Vec::len), Some(3), "{doc:#}");
    assert_eq!(code, 0);
}

/// The detail of check `id` in a `--json` report.
fn detail<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_else(|| panic!("{id} missing: {doc:#}"))
}

/// Issue #18: after the full-grant session, one session per narrowed grant, each a fresh
/// spawn of the command, reported in `sessions` with its grant and its own verdicts.
#[test]
fn later_sessions_run_under_narrowed_grants_and_are_reported() {
    let (code, doc) = scripted("good");
    assert_eq!(code, 0, "{doc:#}");
    let sessions = doc["sessions"].as_array().unwrap();
    let labels: Vec<&str> = sessions
        .iter()
        .map(|s| s["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "full grant",
            "nothing granted",
            "only tools",
            "everything but pushEvents",
            "everything but channels.*",
            "everything but the hook leaves",
            "nothing granted, effectiveCapabilities absent after the full grant",
            "only tools, deniedCapabilities omitted, contextHooks.* and channels listed",
            "only demo.ask enabled",
            "demo.ask disabled",
            "demo.push disabled",
            "demo.status disabled",
        ]
    );
    // The grant each session sent, as its policy Request carried it (§5.3).
    assert_eq!(
        sessions[1]["grant"]["effectiveCapabilities"],
        serde_json::json!([])
    );
    assert_eq!(
        sessions[2]["grant"]["effectiveCapabilities"],
        serde_json::json!(["tools"])
    );
    assert_eq!(
        sessions[10]["grant"]["disabled"],
        serde_json::json!(["demo.push"])
    );
    // Spelt as live servers misread (§5.3, §5.4): nothing granted by absence, after the
    // full grant; decoys beside `tools` and no `deniedCapabilities`; an allowlist.
    assert!(sessions[6]["grant"].get("effectiveCapabilities").is_none());
    assert_eq!(
        sessions[7]["grant"]["effectiveCapabilities"],
        serde_json::json!(["tools", "contextHooks.*", "channels"])
    );
    assert!(sessions[7]["grant"].get("deniedCapabilities").is_none());
    assert_eq!(
        sessions[8]["grant"]["enabled"],
        serde_json::json!(["demo.ask"])
    );
    assert!(sessions[0]["grant"]["effectiveCapabilities"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "pushEvents"));
    // The first session reports every check; a later one what it judged.
    assert_eq!(
        sessions[0]["checks"].as_array().unwrap().len(),
        doc["checks"].as_array().unwrap().len()
    );
    for s in &sessions[1..] {
        let ids: BTreeSet<&str> = s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        for id in ["grant.narrowed-respected", "featuresets.narrowed-respected"] {
            assert!(ids.contains(id), "{id}: {s:#}");
        }
    }
    for id in ["grant.narrowed-respected", "featuresets.narrowed-respected"] {
        assert!(ids_with(&doc, "pass").contains(id), "{id}: {doc:#}");
    }
}

/// `--quick` and `--sessions 1` are today's single session; `--sessions N` caps the run.
#[test]
fn sessions_flag_caps_the_run_and_quick_is_one_session() {
    for args in [&["--quick"][..], &["--sessions", "1"][..]] {
        let mut all = args.to_vec();
        all.extend(["--", FIXTURE, "good"]);
        let (code, doc) = check(&all);
        assert_eq!(code, 0, "{args:?}: {doc:#}");
        assert_eq!(doc["sessions"].as_array().unwrap().len(), 1, "{args:?}");
        assert!(ids_with(&doc, "skip").contains("grant.narrowed-respected"));
        assert!(detail(&doc, "grant.narrowed-respected").contains("--sessions 1"));
    }
    let (_, doc) = check(&["--sessions", "3", "--", FIXTURE, "good"]);
    assert_eq!(doc["sessions"].as_array().unwrap().len(), 3, "{doc:#}");
    for bad in [
        &["--sessions", "0"][..],
        &["--quick", "--sessions", "2"][..],
    ] {
        let out = Command::cargo_bin("mcpl")
            .unwrap()
            .arg("check")
            .args(bad)
            .args(["--", FIXTURE, "good"])
            .timeout(GUARD)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
}

/// A server that ignores the grant (AUDIT-001's commonest defect) fails the narrowed-grant
/// check, naming the session's grant and the message, and nothing else; one that ignores
/// the initial policy's `disabled` fails the feature-set one.
#[test]
fn s5_4_s6_4_a_server_that_ignores_a_narrowed_grant_fails_exactly_that() {
    let doc = fails_exactly("ignores-grant", &["grant.narrowed-respected"]);
    let d = detail(&doc, "grant.narrowed-respected");
    assert!(d.contains("(nothing granted)"), "{d}");
    assert!(
        d.contains("push/event needs pushEvents, not granted"),
        "{d}"
    );
    let doc = fails_exactly("ignores-disabled", &["featuresets.narrowed-respected"]);
    let d = detail(&doc, "featuresets.narrowed-respected");
    assert!(d.contains("disabled)"), "{d}");
    assert!(d.contains("under featureSet"), "{d}");
}

/// §6.7: traffic a server starts on its own (here: written before each ping answer) must stop
/// under a reduction; the reduction's window opens with a ping, as the quiet windows do.
#[test]
fn s6_7_own_traffic_that_ignores_a_reduction_fails_reduction_respected() {
    // A server that ignores a reduction also ignores the narrowed session that takes the
    // full grant back with a policy lacking `effectiveCapabilities` (§5.3): the narrowed
    // check fails there too.
    fails_exactly(
        "reduction-ignored-own",
        &["policy.reduction-respected", "grant.narrowed-respected"],
    );
}

/// §6.4, §6.7: a receipt that claims nothing degraded while the host's derivation
/// disables sets fails the cross-check (and only it).
#[test]
fn s6_4_a_receipt_contradicting_the_derivation_fails() {
    let doc = fails_exactly(
        "receipt-contradicts",
        &["policy.receipt-matches-derivation"],
    );
    assert!(
        detail(&doc, "policy.receipt-matches-derivation").contains("does not report"),
        "{doc:#}"
    );
}

/// Requests outside MCP + MCPL 0.5 are reported with their counts, 0.4-era ones named.
#[test]
fn methods_outside_the_vocabulary_are_a_warning_with_counts() {
    let (code, doc) = scripted("state-update");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(
        ids_with(&doc, "warn"),
        set(&["rpc.methods-in-vocabulary"]),
        "{doc:#}"
    );
    let d = detail(&doc, "rpc.methods-in-vocabulary");
    assert!(d.contains("\"state/update\" ×3"), "{d}");
    assert!(
        d.contains("\"featureSets/changed\" ×1 (0.4-era, removed in 0.5.0"),
        "{d}"
    );
    assert_eq!(code, 0);
}

/// §6.7: with no hook set, the narrowing Notification disables a set the server pushes
/// under, and its own traffic after the Notification is judged.
#[test]
fn s6_7_notification_narrowing_is_judged_on_pushes_when_no_hook_exists() {
    passes_cleanly("push-only", &["policy.notification-narrowing-respected"]);
    fails_exactly(
        "push-only-ignores-narrowing",
        &["policy.notification-narrowing-respected"],
    );
}

/// §6.5, §6.7 (bc1e716's reading, pinned): a push whose `featureSet` is no string names no
/// feature set. After the reduction receipt it counts against `policy.reduction-respected`
/// (outside every grant), but it is no evidence that the server narrowed: a server whose
/// only traffic after the narrowing Notification is such pushes leaves
/// `policy.notification-narrowing-respected` skipped (nothing under a named set to judge),
/// where counting them passed it.
#[test]
fn s6_7_a_push_naming_no_set_is_no_narrowing_evidence_but_breaks_the_reduction() {
    let doc = fails_exactly(
        "push-only-untagged",
        &["push.event-shape", "policy.reduction-respected"],
    );
    let narrowing = "policy.notification-narrowing-respected";
    assert!(ids_with(&doc, "skip").contains(narrowing), "{doc:#}");
    assert!(
        detail(&doc, narrowing).contains("nothing feature-set-tagged came after it"),
        "{doc:#}"
    );
    let d = detail(&doc, "policy.reduction-respected");
    assert!(
        d.contains("push/event under a featureSet of type number"),
        "{d}"
    );
}

/// §8: without `mcpl/manifest`, the unknown-member probe repeats a request the server
/// answers (`tools/list` here).
#[test]
fn s8_unknown_members_are_probed_on_a_method_the_server_answers() {
    passes_cleanly("no-manifest", &["rpc.unknown-members-ignored"]);
    let (_, doc) = scripted("no-manifest");
    assert!(
        detail(&doc, "rpc.unknown-members-ignored").starts_with("tools/list"),
        "{doc:#}"
    );
    fails_exactly("no-manifest-strict", &["rpc.unknown-members-ignored"]);
}

/// §8 and MCP's pagination: a `nextCursor` is an opaque token, which a server may issue
/// afresh for every request of the first page. The unknown-member probe compared the two
/// `tools/list` answers whole, so such a server, answering the probe exactly as without the
/// member, failed `rpc.unknown-members-ignored` ("returned another result").
#[test]
fn s8_a_fresh_opaque_cursor_is_not_another_result() {
    passes_cleanly("no-manifest-paged", &["rpc.unknown-members-ignored"]);
}

/// §8: MCP gives `tools/list` no order, and a server listing its tools from a hash map
/// names them in another order from one call to the next. The unknown-member probe compared
/// the arrays in order, so such a server, answering the probe with the same tools, failed
/// `rpc.unknown-members-ignored`.
#[test]
fn s8_the_same_tools_in_another_order_are_not_another_result() {
    passes_cleanly("no-manifest-shuffled", &["rpc.unknown-members-ignored"]);
}

/// §14.3: the channels a server knows for a connection change (it registers one between two
/// requests). The unknown-member probe on `channels/list` compared its answer with the one
/// the channel probes took earlier, so a server that registered a channel in between, and
/// answered the probe exactly as without the member, failed `rpc.unknown-members-ignored`;
/// it compares two answers taken back to back now.
#[test]
fn s14_3_a_channel_registered_between_the_two_lists_is_not_another_result() {
    passes_cleanly(
        "no-manifest-channels-grow",
        &["rpc.unknown-members-ignored"],
    );
    let (_, doc) = scripted("no-manifest-channels-grow");
    assert!(
        detail(&doc, "rpc.unknown-members-ignored").starts_with("channels/list"),
        "{doc:#}"
    );
}

/// §14.6: the unknown-channel probes also use an id shaped like the server's own, and say
/// which: a server that delivers to any id of its own shape fails; one that refuses a
/// foreign shape with -32602 but an unknown channel of its shape with -32023 passes.
#[test]
fn s14_6_unknown_channel_probes_use_the_servers_own_id_shape() {
    let doc = fails_exactly("delivers-any-channel", &["channels.unknown-channel-error"]);
    let d = detail(&doc, "channels.unknown-channel-error");
    assert!(
        d.contains("demo:#mcpl-check-unknown (shaped like demo:#general): answered with a result"),
        "{d}"
    );
    passes_cleanly(
        "parses-channel-ids",
        &[
            "channels.unknown-channel-error",
            "channels.close-unknown-error",
        ],
    );
}

/// A closed stdout (`mcpl check --json … | head -c 100`) is not worth a panic: `check` and
/// `check-host` write their output as every other command does (`term::emit`), ignoring the
/// failed write, and exit with their own code. Before, `println!` panicked ("failed printing
/// to stdout: Broken pipe"), exit 101 with a backtrace on stderr.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let cases: [(&[&str], i32); 3] = [
        (&["check", "--list"], 0),
        (
            &["check", "--json", "--", "/nonexistent/mcpl-no-such-server"],
            2,
        ),
        (&["check-host", "--list"], 0),
    ];
    for (args, code) in cases {
        // The read end is closed before the command starts: every write fails (EPIPE).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = StdCommand::new(assert_cmd::cargo::cargo_bin("mcpl"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        // The same with stderr closed too (`… 2>&1 | head`): the error line is not a panic.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = StdCommand::new(assert_cmd::cargo::cargo_bin("mcpl"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(writer.try_clone().unwrap())
            .stderr(writer)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "{args:?} with stderr closed");
    }
}

/// §10.7: "Context hooks MUST NOT trigger `inference/request` calls", inference for a hook
/// being done "asynchronously outside the hook response path". A server that, handed a
/// `context/beforeInference`, sends an `inference/request` and awaits its answer before
/// answering the hook passed every check (the request itself is well-formed and granted).
/// It now fails `hooks.no-inference-in-hook`, and only that.
#[test]
fn s10_7_inference_requested_on_the_hook_path_fails() {
    let doc = fails_exactly("hook-inference", &["hooks.no-inference-in-hook"]);
    let c = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "hooks.no-inference-in-hook")
        .unwrap();
    let d = c["detail"].as_str().unwrap();
    assert!(
        d.contains("inference/request") && d.contains("§10.7"),
        "{d}"
    );
    // The dependency is what is shown: no answer while the request was held, one once the
    // checker answered it (and that answer is the hook's, so no hook check fails for it).
    assert!(
        d.contains("held") && d.contains("answered once the checker answered it"),
        "{d}"
    );
}

/// §10.7's second sentence: inference a hook needs is asked for "asynchronously outside the
/// hook response path". A server that, handed a `context/beforeInference`, sends an
/// `inference/request` and answers the hook without waiting for it conforms: the checker
/// holds that request unanswered and the hook's answer still comes, so
/// `hooks.no-inference-in-hook` passes (it failed on the request's mere arrival), and
/// nothing else fails.
#[test]
fn s10_7_inference_asked_asynchronously_on_a_hook_passes() {
    passes_cleanly("hook-inference-async", &["hooks.no-inference-in-hook"]);
}

/// §6.6: a request with an id is answered, with an error if nothing else. A server that
/// answers the first `context/beforeInference` (turn 0) and never a later one (the hooks
/// the notification-narrowing and reduction probes send, each with `userMessage` null)
/// fails `hooks.answers-without-observe` at the first one left unanswered, naming it;
/// nothing passes on the strength of a hook that never came back.
#[test]
fn s6_6_a_later_hook_never_answered_fails() {
    let (code, doc) = scripted("hook-silent-later");
    assert_complete(&doc);
    let c = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "hooks.answers-without-observe")
        .unwrap();
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = c["detail"].as_str().unwrap();
    assert!(
        d.contains("turn 1") && d.contains("no response within the timeout") && d.contains("§6.6"),
        "{d}"
    );
    assert_eq!(code, 1, "{doc:#}");
}

/// A hook the server never answers, though it sent an `inference/request` meanwhile, is not
/// shown to wait on inference (the request was held, then answered, and still no answer came):
/// `hooks.no-inference-in-hook` says it could not judge rather than fail, and nothing fails
/// for the checker's holding; the silence itself fails `hooks.answers-without-observe`
/// (§6.6), and nothing else.
#[test]
fn s10_7_a_hook_never_answered_is_not_taken_for_one_waiting_on_inference() {
    let (_, doc) = scripted("hook-inference-silent");
    assert_complete(&doc);
    assert_eq!(
        ids_with(&doc, "fail"),
        set(&["hooks.answers-without-observe"]),
        "{doc:#}"
    );
    let c = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "hooks.no-inference-in-hook")
        .unwrap();
    assert_eq!(c["status"], "skip", "{c}");
    let d = c["detail"].as_str().unwrap();
    assert!(
        d.contains("nor within --timeout once the checker answered it"),
        "{d}"
    );
}

/// §17.1, §17.3: a manifest that changes and changes back (a set added, then removed, each
/// announced with its revision and `featureSets`) ends where it began; the revision going
/// back is no defect (revisions are compared for equality only). The checker compared the
/// manifest of `initialize` with the one served after the watch, found no domain changed,
/// and warned that `featureSets` was announced "but it did not change".
#[test]
fn a_manifest_changed_and_changed_back_is_not_warned() {
    let (code, doc) = scripted("changed-and-back");
    assert_eq!(ids_with(&doc, "fail"), set(&[]), "{doc:#}");
    assert_eq!(ids_with(&doc, "warn"), set(&[]), "{doc:#}");
    for id in [
        "manifest.changed-shape",
        "manifest.changed-revision-matches",
        "manifest.changed-domains-match",
    ] {
        assert!(ids_with(&doc, "pass").contains(id), "{id}: {doc:#}");
    }
    assert_eq!(code, 0);
}

/// MCP's stdio framing is one message per line; the library's peer reads a line holding
/// several whole messages each as if alone (`mcpl::jsonrpc::several_values`), so a host
/// built on it takes the push on such a line. A server writing a push under a set the
/// reduction disabled on one line with a notification hid it from `mcpl check`, which read
/// the line as junk: it failed `transport.frames-valid` alone and passed
/// `policy.reduction-respected`. Each message is now judged, as the peer reads it, and the
/// framing still fails.
#[test]
fn each_message_of_a_line_of_several_is_judged() {
    let doc = fails_exactly(
        "reduction-ignored-one-line",
        &[
            "transport.frames-valid",
            "policy.reduction-respected",
            "grant.narrowed-respected",
        ],
    );
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("2 messages on one line"), "{d}");
}

/// JSON-RPC 2.0 §5: a response answers a request, once. A server writing a response under
/// an id the checker never sent, and a second answer to one `ping`, wrote valid JSON-RPC
/// messages (so `transport.frames-valid`, "every frame is a JSON-RPC 2.0 message", passes,
/// as `mcpl check-host`'s `host.frames-valid` reads such frames) that answer nothing: they
/// fail `rpc.responses-answer-requests`, naming both.
#[test]
fn responses_to_no_request_fail_their_own_check() {
    let doc = fails_exactly("stray-responses", &["rpc.responses-answer-requests"]);
    let d = detail(&doc, "rpc.responses-answer-requests");
    assert!(d.contains(r#""never-sent""#), "{d}");
    assert!(d.contains("already answered"), "{d}");
}

/// The `hooks.*` checks judge every `context/beforeInference` answer the checker reads, not
/// only the first: a server whose later answers inject at a position not granted, without a
/// `namespace`, under an undeclared set failed none of them.
#[test]
fn every_hook_answer_is_judged() {
    let doc = fails_exactly(
        "hook-bad-later",
        &[
            "hooks.injection-shape",
            "hooks.injection-positions",
            "hooks.feature-set-declared",
        ],
    );
    assert!(
        detail(&doc, "hooks.injection-positions").contains("turn 1"),
        "{doc:#}"
    );
}

/// §5.4: a hook answer is authorized at receipt, however late it comes. A server holding
/// its first `context/beforeInference` answer past the checker's timeout, then answering it
/// under an undeclared set at the ungranted `system`, failed only for its silence: the late
/// answer was dropped as lateness, every `hooks.*` check skipped, "no beforeInference
/// result" (r1 round 3, F1).
#[test]
fn a_hook_answer_after_the_timeout_is_still_judged() {
    let (_, doc) = scripted("hook-late");
    let failed = ids_with(&doc, "fail");
    for id in ["hooks.injection-positions", "hooks.feature-set-declared"] {
        assert!(failed.contains(id), "{id}: {doc:#}");
        assert!(detail(&doc, id).contains("turn 0"), "{id}: {doc:#}");
    }
    assert!(
        detail(&doc, "hooks.feature-set-declared").contains("demo.late"),
        "{doc:#}"
    );
    assert!(failed.contains("hooks.answers-without-observe"), "{doc:#}");
}

/// §6.7: after the reduction receipt nothing comes under a disabled set, the one disabled
/// earlier by Notification (and kept disabled by every Request since) included. A hook
/// answered after the reduction with injections under that set passed every check: the
/// reduction's judgement looked only at the sets it disabled itself, and the Notification's
/// check had been settled before.
#[test]
fn an_injection_under_a_set_disabled_by_notification_fails_after_the_reduction() {
    let doc = fails_exactly("hook-notified-later", &["policy.reduction-respected"]);
    let d = detail(&doc, "policy.reduction-respected");
    assert!(d.contains("demo.status"), "{d}");
}

/// The same for a push: after the reduction receipt, a push under the set disabled by
/// Notification (which the reduction keeps disabled) was counted for the Notification's
/// check, already settled, and so judged nowhere.
#[test]
fn a_push_under_a_set_disabled_by_notification_fails_after_the_reduction() {
    let doc = fails_exactly("push-only-notified-later", &["policy.reduction-respected"]);
    let d = detail(&doc, "policy.reduction-respected");
    assert!(
        d.contains(r#"push/event under featureSet "demo.alerts""#),
        "{d}"
    );
}

/// §6.7: a set disabled by Notification stays disabled from the point the server read it.
/// A push under it written after the Notification's check was settled, and before the
/// reduction was answered, was counted for that check and reported nowhere.
#[test]
fn a_push_under_a_set_disabled_by_notification_fails_after_its_check_was_settled() {
    let doc = fails_exactly(
        "push-only-notified-early",
        &["policy.notification-narrowing-respected"],
    );
    let d = detail(&doc, "policy.notification-narrowing-respected");
    assert!(d.contains("demo.alerts"), "{d}");
}
