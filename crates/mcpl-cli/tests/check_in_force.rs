//! `mcpl check` judges a server against the manifest in force (§17.5): the one it fetched
//! after `mcpl/manifestChanged`, by the library host's own review (removals revoke at once,
//! additions never grant), not the one presented at `initialize`. An answer that decides
//! authority (`initialize`, `mcpl/manifest`) naming a member twice is refused whole, as the
//! library host refuses it (§5.4, I-JSON). And a widening sent as a `featureSets/update`
//! Notification once ready must be ignored by the server (§6.7).

mod common;

use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

use common::ids_with;

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcpl-scripted-server");
/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(120);

/// `mcpl check --json --timeout 1 --watch 0 ARGS -- FIXTURE MODE`: exit code and report.
fn scripted(mode: &str, args: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args(["check", "--json", "--timeout", "1", "--watch", "0"])
        .args(args)
        .args(["--", FIXTURE, mode])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", out.stdout));
    (out.status.code().unwrap(), doc)
}

fn check<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no {id} in {doc:#}"))
}

fn status<'a>(doc: &'a Value, id: &str) -> &'a str {
    check(doc, id)["status"].as_str().unwrap_or_default()
}

fn detail<'a>(doc: &'a Value, id: &str) -> &'a str {
    check(doc, id)["detail"].as_str().unwrap_or_default()
}

/// F1: a server announces (§17.3) and serves a manifest without `pushEvents` and without
/// `demo.push`, then pushes under `demo.push`. The checker took the push (`accepted: true`)
/// and passed `push.feature-set-declared` and `grant.messages-within-grant`, judging it
/// against the manifest of `initialize`; the library host revokes at once what the fetched
/// manifest removes (§17.5 step 3). Both checks now fail, saying the manifest withdrew it.
#[test]
fn a_push_under_what_the_fetched_manifest_withdrew_fails() {
    let (code, doc) = scripted("withdraws-push", &["--quick"]);
    assert_eq!(
        ids_with(&doc, "fail"),
        ["grant.messages-within-grant", "push.feature-set-declared"]
            .map(str::to_owned)
            .into(),
        "{doc:#}"
    );
    let declared = detail(&doc, "push.feature-set-declared");
    assert!(
        declared.contains("demo.push") && declared.contains("§17.5"),
        "{declared}"
    );
    let grant = detail(&doc, "grant.messages-within-grant");
    assert!(
        grant.contains("pushEvents") && grant.contains("§17.5"),
        "{grant}"
    );
    // The announcement itself was right.
    assert_eq!(
        status(&doc, "manifest.changed-domains-match"),
        "pass",
        "{doc:#}"
    );
    assert_eq!(code, 1);
}

/// §17.5 step 3, §6.7: a removal by the served manifest revokes host-first, then the host
/// sends the Request and reads the receipt. The checker applied the withdrawal and never
/// told the server; it now sends a `featureSets/update` Request once the served manifest
/// is read (no longer granting `pushEvents`), and `manifest.revocation-answered` passes on
/// the library server's receipt.
#[test]
fn a_withdrawal_by_the_served_manifest_is_told_by_a_policy_request() {
    let dir = std::env::temp_dir().join(format!("mcpl-in-force-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("revocation.jsonl");
    let (_, doc) = scripted(
        "withdraws-push",
        &["--quick", "--transcript", path.to_str().unwrap()],
    );
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let mut methods = std::collections::HashMap::new();
    let mut fetched = false;
    let mut told = None;
    for line in &lines {
        let m = &line["message"];
        match line["direction"].as_str() {
            Some("sent") if m["method"].is_string() && !m["id"].is_null() => {
                methods.insert(m["id"].to_string(), m["method"].clone());
                if fetched && m["method"] == "featureSets/update" && told.is_none() {
                    told = Some(m["params"].clone());
                }
            }
            Some("received") if m["method"].is_null() => {
                fetched |= methods.get(&m["id"].to_string()) == Some(&Value::from("mcpl/manifest"));
            }
            _ => {}
        }
    }
    let told = told.unwrap_or_else(|| panic!("no policy Request after the fetch: {lines:#?}"));
    assert!(
        !told.to_string().contains("pushEvents\"")
            || told["deniedCapabilities"]
                .to_string()
                .contains("pushEvents"),
        "the Request grants what the manifest withdrew: {told}"
    );
    assert_eq!(
        status(&doc, "manifest.revocation-answered"),
        "pass",
        "{doc:#}"
    );
    let d = detail(&doc, "manifest.revocation-answered");
    assert!(d.contains("pushEvents"), "{d}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same withdrawal, told to a server that leaves the Request unanswered:
/// `manifest.revocation-answered` fails, saying no answer came.
#[test]
fn a_revocation_request_left_unanswered_fails() {
    let (_, doc) = scripted("withdraws-push-unanswered", &["--quick"]);
    assert_eq!(
        status(&doc, "manifest.revocation-answered"),
        "fail",
        "{doc:#}"
    );
    let d = detail(&doc, "manifest.revocation-answered");
    assert!(d.contains("pushEvents") && d.contains("no response"), "{d}");
}

/// The same withdrawal in a manifest past the host's feature-set bound (2,000 more sets):
/// the library host reads only its removals (`ManifestReview::on_fetched_past_bound`, §17.5
/// step 1: a manifest it will not read whole must not leave broader authority standing), and
/// so does the checker.
#[test]
fn a_withdrawal_past_the_feature_set_bound_still_applies() {
    let (code, doc) = scripted("withdraws-push-many", &["--quick"]);
    assert_eq!(
        ids_with(&doc, "fail"),
        ["grant.messages-within-grant", "push.feature-set-declared"]
            .map(str::to_owned)
            .into(),
        "{doc:#}"
    );
    // The served manifest is judged as at `initialize` (§17.5): its warning replaces the
    // initial manifest's pass, which it had left standing (a warning never replaced one).
    assert_eq!(
        status(&doc, "manifest.feature-set-count"),
        "warn",
        "{doc:#}"
    );
    let d = detail(&doc, "manifest.feature-set-count");
    assert!(
        d.contains("mcpl/manifest served") && d.contains("2003"),
        "{d}"
    );
    // It says what a library host does with a fetched manifest past the bound (applies its
    // removals only), not what it does with one at `initialize` (refuses it, granting
    // nothing), which is not what happened here.
    assert!(
        d.contains("removals") && !d.contains("at initialize") && !d.contains("grant nothing"),
        "{d}"
    );
    assert_eq!(code, 1);
}

/// F1: a server withdraws `contextHooks` and the set it injected under: a host no longer
/// fans the hook out (nothing of it is granted now), so the hook checks are skipped saying
/// why, where the checker sent it and passed an injection under the withdrawn set.
#[test]
fn no_hook_is_sent_once_the_fetched_manifest_withdrew_them() {
    let (_, doc) = scripted("withdraws-hooks", &["--quick"]);
    for id in [
        "hooks.answers-without-observe",
        "hooks.feature-set-declared",
        "hooks.injection-positions",
    ] {
        assert_eq!(status(&doc, id), "skip", "{id}: {doc:#}");
    }
    let d = detail(&doc, "hooks.feature-set-declared");
    assert!(d.contains("§17.5"), "{d}");
}

/// F1: a server withdraws only the set it injects under (`contextHooks` stays advertised)
/// and goes on injecting under it: `hooks.feature-set-declared` fails (the set is not
/// declared in the manifest in force), where it passed.
#[test]
fn an_injection_under_a_set_the_fetched_manifest_withdrew_fails() {
    let (code, doc) = scripted("withdraws-hook-set", &["--quick"]);
    assert_eq!(
        ids_with(&doc, "fail"),
        ["hooks.feature-set-declared"].map(str::to_owned).into(),
        "{doc:#}"
    );
    let d = detail(&doc, "hooks.feature-set-declared");
    assert!(d.contains("demo.status") && d.contains("§17.5"), "{d}");
    assert_eq!(code, 1);
}

/// F3: an `initialize` answer naming `mcpl` twice in `capabilities.experimental` (a manifest
/// declaring nothing, then a full one). The checker read the last copy, passed
/// `initialize.answered` and only warned under `transport.member-names-unique`; the library
/// host refuses such an answer whole (`jsonrpc::repeated::answer_read_whole`). The strict host now
/// refuses it too: `initialize.answered` fails, naming the member and why, and
/// `transport.member-names-unique` still warns about the repeat.
#[test]
fn an_initialize_answer_naming_a_member_twice_is_refused() {
    let (code, doc) = scripted("authority-doubled-init", &["--quick"]);
    assert_eq!(status(&doc, "initialize.answered"), "fail", "{doc:#}");
    let d = detail(&doc, "initialize.answered");
    assert!(
        d.contains(r#""mcpl""#) && d.contains("decides authority") && d.contains("RFC 7493"),
        "{d}"
    );
    // The repetition is exactly `transport.member-names-unique`'s finding: it still warns,
    // where it was skipped with the rest.
    assert_eq!(
        status(&doc, "transport.member-names-unique"),
        "warn",
        "{doc:#}"
    );
    let d = detail(&doc, "transport.member-names-unique");
    assert!(d.contains(r#""mcpl""#), "{d}");
    assert_eq!(code, 1);
}

/// F3: an `mcpl/manifest` answer naming `pushEvents` twice (`false`, then `true`): the
/// checker passed `manifest.fetch`; the strict host now refuses the answer whole, and
/// `manifest.fetch` fails saying why. `transport.member-names-unique` keeps its meaning: it
/// warns about the repeat, as for any message.
#[test]
fn a_manifest_answer_naming_a_member_twice_is_refused() {
    let (code, doc) = scripted("authority-doubled-manifest", &["--quick"]);
    assert_eq!(
        ids_with(&doc, "fail"),
        ["manifest.fetch"].map(str::to_owned).into(),
        "{doc:#}"
    );
    let d = detail(&doc, "manifest.fetch");
    assert!(
        d.contains(r#""pushEvents""#) && d.contains("decides authority"),
        "{d}"
    );
    assert_eq!(
        status(&doc, "transport.member-names-unique"),
        "warn",
        "{doc:#}"
    );
    assert_eq!(code, 1);
}

/// F4: no widening `featureSets/update` Notification was ever sent once ready, so a server
/// that acts on one (§6.7: it must discard its `effectiveCapabilities`, `enabled` and any
/// widening) passed every session. Each narrowed session now sends the full grant as a
/// Notification once its narrowed policy is in force; under "nothing granted" this server
/// then pushes, and `grant.narrowed-respected` fails, saying the push came after that
/// Notification.
#[test]
fn a_server_acting_on_a_widening_notification_fails_the_narrowed_check() {
    let (code, doc) = scripted("honours-widening", &["--sessions", "2"]);
    assert_eq!(
        ids_with(&doc, "fail"),
        ["grant.narrowed-respected"].map(str::to_owned).into(),
        "{doc:#}"
    );
    let d = detail(&doc, "grant.narrowed-respected");
    assert!(
        d.contains("push/event") && d.contains("Notification") && d.contains("§6.7"),
        "{d}"
    );
    assert_eq!(code, 1);
}

/// A server that discards a Notification's widening (the scripted fixture, by the library's
/// `ServerPolicyState`) passes the narrowed checks, which say the Notification was sent.
#[test]
fn a_server_discarding_a_widening_notification_passes() {
    let (code, doc) = scripted("good", &["--sessions", "2"]);
    assert_eq!(ids_with(&doc, "fail"), Default::default(), "{doc:#}");
    // The narrowed session's own verdict (the top-level one sums the sessions up).
    let d = check(&doc["sessions"][1], "grant.narrowed-respected")["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(d.contains("Notification") && d.contains("§6.7"), "{d}");
    assert_eq!(code, 0);
}

/// Runs `mcpl check --json --quick --timeout 1 --watch 0 -- sh -c SCRIPT`.
fn check_script(script: &str) -> Value {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args([
            "check",
            "--json",
            "--quick",
            "--timeout",
            "1",
            "--watch",
            "0",
        ])
        .args(["--", "sh", "-c", script])
        .timeout(GUARD)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", out.stdout))
}

/// A server that answers `initialize` (id 1) with `entries` (a batch's text), then answers
/// each request `{}` (a policy with `{"accepted":true}`).
fn batch_answering(entries: &str) -> String {
    format!(
        "read l; printf '%s\\n' '{entries}'; \
         while read l; do \
         id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
         [ -z \"$id\" ] && continue; \
         case \"$l\" in *featureSets/update*) r='{{\"accepted\":true}}';; *) r='{{}}';; esac; \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}}\\n' \"$id\" \"$r\"; \
         done"
    )
}

/// The `initialize` answer (id 1), MCPL 0.5 with nothing advertised; `mcpl` its
/// `experimental` members' text.
fn init_answer(mcpl: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":"2025-06-18","capabilities":{{"experimental":{{{mcpl}}}}},"serverInfo":{{"name":"s","version":"1"}}}}}}"#
    )
}

/// F3 in a batch: the `initialize` answer naming `mcpl` twice as the second entry of a batch
/// is refused as when it comes alone, while a repeat in another entry of the batch (a
/// notification's data) leaves the answer read: only the entry that answers decides.
#[test]
fn in_a_batch_only_the_answering_entry_decides() {
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"a":1,"a":2}}}"#;
    let plain = init_answer(r#""mcpl":{"version":"0.5"}"#);
    let doc = check_script(&batch_answering(&format!("[{note},{plain}]")));
    assert_eq!(status(&doc, "initialize.answered"), "pass", "{doc:#}");
    assert_eq!(
        status(&doc, "transport.member-names-unique"),
        "warn",
        "{doc:#}"
    );
    let quiet = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
    let doubled =
        init_answer(r#""mcpl":{"version":"0.5","featureSets":{}},"mcpl":{"version":"0.5"}"#);
    let doc = check_script(&batch_answering(&format!("[{quiet},{doubled}]")));
    assert_eq!(status(&doc, "initialize.answered"), "fail", "{doc:#}");
    let d = detail(&doc, "initialize.answered");
    assert!(d.contains(r#""mcpl""#) && d.contains("[1]"), "{d}");
}
