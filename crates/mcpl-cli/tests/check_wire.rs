//! `mcpl check` against servers scripted byte by byte (`sh -c`, over real pipes): what the
//! report says of framing the library tolerates or cannot see as a message (§4: one message
//! per line).

use std::time::Duration;

use assert_cmd::Command;
use serde_json::{json, Value};

/// A guard against a hanging run (the test then fails); not a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

/// The answer to the checker's `initialize` (its id is 1): MCPL 0.5, nothing advertised.
const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":{"version":"0.5"}}},"serverInfo":{"name":"s","version":"1"}}}"#;

/// Runs `mcpl check --json --quick --timeout 1 --watch 0 -- sh -c SCRIPT`.
fn check_script(script: &str) -> Value {
    check_script_within(script, "1")
}

/// [`check_script`] with `--timeout` set to `timeout` seconds.
fn check_script_within(script: &str, timeout: &str) -> Value {
    let out = Command::cargo_bin("mcpl")
        .unwrap()
        .args([
            "check",
            "--json",
            "--quick",
            "--timeout",
            timeout,
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

fn detail<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == id))
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_else(|| panic!("no {id} in {doc:#}"))
}

/// A server that answers `initialize`, then writes part of a line (the start of an answer,
/// no newline) and stalls, or exits: the check that waited for that answer quotes what was
/// left unfinished, where it said only "no response within the timeout" or "end of
/// stream" and the bytes (never a frame while the server stalls) were mentioned nowhere.
#[test]
fn a_line_left_unfinished_is_quoted_by_the_check_that_waited() {
    for (end, why) in [
        ("exec sleep 60", "no response within the timeout"),
        ("exit 0", "end of stream"),
    ] {
        // initialize; notifications/initialized; then the next request is answered in part.
        let script = format!(
            "read l; printf '%s\\n' '{INIT}'; read l; read l; \
             printf '%s' '{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{\"unfinis'; {end}"
        );
        let doc = check_script(&script);
        let d = detail(&doc, "policy.request-answered");
        assert!(d.contains(why), "{end}: {d}");
        assert!(d.contains("unfinished"), "{end}: {d}");
        assert!(
            d.contains(r#"\"unfinis"#),
            "{end}: the bytes are quoted: {d}"
        );
    }
}

/// What is quoted of an unfinished line is clipped, its length said: 100,000 bytes of a
/// line without its end are not carried into the report whole.
#[test]
fn an_unfinished_line_is_quoted_clipped() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s' '{{\"x\":\"'; head -c 99994 /dev/zero | tr '\\000' a; exec sleep 60"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "policy.request-answered");
    assert!(d.contains("100000 bytes"), "{d}");
    assert!(d.contains(r#"{\"x\":\"aaa"#), "{d}");
    assert!(!d.contains(&"a".repeat(300)), "{d}");
}

/// A server that answers the checker's next request under an id the checker never sent (the
/// string `"2"` for the number 2), then says nothing more: the check where the silence is
/// reported says what came meanwhile instead of an answer, where it said only "no response
/// within the timeout" (the frame is counted under `rpc.responses-answer-requests`).
#[test]
fn what_came_instead_of_an_answer_is_said_where_the_silence_is_reported() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":\"2\",\"result\":{{}}}}'; exec sleep 60"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "policy.request-answered");
    assert!(d.contains("no response within the timeout"), "{d}");
    assert!(d.contains("meanwhile"), "{d}");
    assert!(d.contains("answering no request of the checker's"), "{d}");
    assert!(
        d.contains(r#"response under id \"2\", which the checker never sent"#),
        "{d}"
    );
}

/// An answer carrying a number past a 64-bit float (`1e400`, JSON by RFC 8259's grammar)
/// is reported as a JSON text the checker could not read, not as "junk (not JSON)".
#[test]
fn a_number_out_of_range_is_not_called_junk() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{}},\"x\":1e400}}'; \
         exec sleep 60"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("number out of range"), "{d}");
    assert!(!d.contains("junk"), "{d}");
}

fn status<'a>(doc: &'a Value, id: &str) -> &'a str {
    doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == id))
        .and_then(|c| c["status"].as_str())
        .unwrap_or_else(|| panic!("no {id} in {doc:#}"))
}

/// A server whose request repeats its `id` member (RFC 8259 §4: names SHOULD be unique;
/// I-JSON, RFC 7493 §2.3, which the §17.2 digest canonicalises, forbids it): the checker, as
/// any `serde_json::Value` reader, takes the last one (12345) and says nothing else, so the
/// report warns under `transport.member-names-unique`, naming the member and the message.
#[test]
fn a_repeated_member_name_warns_naming_it_and_the_message() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":7,\"id\":12345,\"method\":\"ping\"}}'; \
         exec sleep 60"
    );
    let doc = check_script(&script);
    assert_eq!(
        status(&doc, "transport.member-names-unique"),
        "warn",
        "{doc:#}"
    );
    let d = detail(&doc, "transport.member-names-unique");
    assert!(d.contains(r#""id""#), "{d}");
    assert!(d.contains("ping") && d.contains("12345"), "{d}");
    // The frame is JSON-RPC all the same: not a failure of framing.
    assert_eq!(status(&doc, "transport.frames-valid"), "pass", "{doc:#}");
}

/// A member repeated deep inside a message (here `serverInfo.name` of the `initialize`
/// answer) is found as well, with where it is.
#[test]
fn a_repeated_member_name_is_found_at_any_depth() {
    let init = INIT.replace(r#""name":"s","#, r#""name":"s","name":"t","#);
    let script = format!("read l; printf '%s\\n' '{init}'; exec sleep 60");
    let doc = check_script(&script);
    assert_eq!(
        status(&doc, "transport.member-names-unique"),
        "warn",
        "{doc:#}"
    );
    let d = detail(&doc, "transport.member-names-unique");
    assert!(
        d.contains(r#""name""#) && d.contains("result.serverInfo"),
        "{d}"
    );
}

/// The report on a server that answers `initialize` and then nothing (`exec sleep 60`),
/// waiting out a timeout per request: run once, judged by each test that needs it.
fn silent_after_initialize() -> &'static Value {
    static REPORT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    REPORT.get_or_init(|| check_script(&format!("read l; printf '%s\\n' '{INIT}'; exec sleep 60")))
}

/// A server whose every frame names each member once passes the check.
#[test]
fn a_server_naming_each_member_once_passes() {
    let doc = silent_after_initialize();
    assert_eq!(
        status(doc, "transport.member-names-unique"),
        "pass",
        "{doc:#}"
    );
}

/// A server that begins its stream with a UTF-8 byte order mark (as Windows tools write
/// one): RFC 8259 §8.1 says a writer must not add it and a parser may ignore it, and the
/// library's peer does, so a library host answers such a server. The checker read the
/// line as junk, failed `initialize.answered` and skipped everything else; it now reads it
/// as the library does and warns under `transport.frames-valid`, naming the mark.
#[test]
fn a_byte_order_mark_before_a_message_warns_and_the_message_is_read() {
    let script = format!("read l; printf '\\357\\273\\277%s\\n' '{INIT}'; exec sleep 60");
    let doc = check_script(&script);
    assert_eq!(status(&doc, "initialize.answered"), "pass", "{doc:#}");
    assert_eq!(status(&doc, "transport.frames-valid"), "warn", "{doc:#}");
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("byte order mark"), "{d}");
}

/// A server that sends `mcpl/manifestChanged` (§17.3: a Notification) as a Request, with an
/// id: the checker, as the library host, answers it `-32601`, and the report said nothing of
/// the form (`manifest.changed-shape` passed, "conform"). It now fails
/// `manifest.changed-is-notification`, as the `*-is-request` checks fail the opposite.
#[test]
fn a_manifest_change_sent_as_a_request_fails_its_form() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":\"mc1\",\"method\":\"mcpl/manifestChanged\",\
         \"params\":{{\"revision\":\"sha256:x\",\"domains\":[\"featureSets\"]}}}}'; \
         exec sleep 60"
    );
    let doc = check_script(&script);
    assert_eq!(
        status(&doc, "manifest.changed-is-notification"),
        "fail",
        "{doc:#}"
    );
    assert!(detail(&doc, "manifest.changed-is-notification").contains("as a Request"));
}

/// An answer whose string holds an escaped lone surrogate (`"\ud800"`: JSON by RFC 8259's
/// grammar, not I-JSON) is reported as a JSON text the checker could not read, not as "junk
/// (not JSON)".
#[test]
fn a_lone_surrogate_is_not_called_junk() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{\"x\":\"\\ud800\"}}}}'; \
         exec sleep 60"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("lone surrogate"), "{d}");
    assert!(!d.contains("junk"), "{d}");
}

/// A server that sends a notification-only method (§4.1; here MCP's
/// `notifications/message`) as a Request, with an id: the checker answers it `-32601`, as
/// the library host does, and the report said nothing of the form. It now fails
/// `rpc.notifications-have-no-id`, naming the method and the id.
#[test]
fn a_notification_sent_as_a_request_fails_its_form() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":\"n7\",\"method\":\"notifications/message\",\
         \"params\":{{\"level\":\"info\",\"data\":\"hello\"}}}}'; \
         exec sleep 60"
    );
    let doc = check_script(&script);
    let id = "rpc.notifications-have-no-id";
    assert_eq!(status(&doc, id), "fail", "{doc:#}");
    let d = detail(&doc, id);
    assert!(d.contains("notifications/message"), "{d}");
    assert!(d.contains(r#""n7""#), "{d}");
}

/// The same notification without an id passes `rpc.notifications-have-no-id`; a server
/// that sends no notification-only method has it skipped.
#[test]
fn a_notification_without_an_id_passes_its_form() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\
         \"params\":{{\"level\":\"info\",\"data\":\"hello\"}}}}'; \
         exec sleep 60"
    );
    // Two independent runs, each waiting out the requests left unanswered: run at once.
    let (doc, quiet) = std::thread::scope(|scope| {
        let quiet = scope.spawn(silent_after_initialize);
        (check_script(&script), quiet.join().expect("the silent run"))
    });
    let id = "rpc.notifications-have-no-id";
    assert_eq!(status(&doc, id), "pass", "{doc:#}");
    assert_eq!(status(quiet, id), "skip", "{quiet:#}");
}

/// A server that echoes every integer request id of the checker's as `N.0` (or `Ne0`):
/// JSON-RPC 2.0 §5 asks for the same value, and RFC 8259 §6 numbers are values (`2.0` is
/// the number 2), so this is no failure; but the requests' ids had no fraction, and a host
/// that matches ids as written (the library's peer refuses a numeric id that is not an
/// integer, `jsonrpc::RequestId`) never pairs them. The checker read each as "invalid
/// JSON-RPC" and waited every answer out as silence ("no response within the timeout"); it
/// now takes each as the answer it is and warns under `transport.frames-valid`, quoting the
/// id and saying why.
#[test]
fn a_response_id_written_2_0_is_the_answer_to_2_with_a_warning() {
    for written in ["%s.0", "%se0"] {
        let script = format!(
            "read l; printf '%s\\n' '{INIT}'; while read l; do \
             id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
             [ -z \"$id\" ] && continue; \
             case \"$l\" in *featureSets/update*) r='{{\"accepted\":true}}';; *) r='{{}}';; esac; \
             printf '{{\"jsonrpc\":\"2.0\",\"id\":{written},\"result\":%s}}\\n' \"$id\" \"$r\"; \
             done"
        );
        let doc = check_script(&script);
        let answered = detail(&doc, "policy.request-answered");
        assert!(!answered.contains("no response"), "{written}: {answered}");
        assert_eq!(status(&doc, "policy.request-answered"), "pass", "{doc:#}");
        assert_eq!(status(&doc, "transport.frames-valid"), "warn", "{doc:#}");
        let d = detail(&doc, "transport.frames-valid");
        assert!(d.contains("id 2.0 for request 2"), "{written}: {d}");
        assert!(d.contains("§5"), "{written}: {d}");
    }
}

/// A server that answers each of the checker's requests (each sent alone) with a one-element
/// array holding the response: JSON-RPC 2.0 §5 says a request is answered with a Response
/// "expressed as a single JSON Object", an array being the answer to a batch only (§6), so
/// this breaks a MUST and fails `transport.frames-valid`, naming the request; each is still
/// read as its answer (the library's peer reads a batch of responses), so nothing else
/// reads as silence. It passed unremarked.
#[test]
fn an_answer_to_a_single_request_in_an_array_fails_frames_valid() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; while read l; do \
         id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
         [ -z \"$id\" ] && continue; \
         case \"$l\" in *featureSets/update*) r='{{\"accepted\":true}}';; *) r='{{}}';; esac; \
         printf '[{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}}]\\n' \"$id\" \"$r\"; \
         done"
    );
    let doc = check_script(&script);
    assert_eq!(status(&doc, "policy.request-answered"), "pass", "{doc:#}");
    assert_eq!(status(&doc, "transport.frames-valid"), "fail", "{doc:#}");
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("response id 2 in a batch"), "{d}");
    assert!(d.contains("§5"), "{d}");
}

/// A response under `2.5`, a number no request of the checker's carried, stays an invalid
/// frame and no answer (the awaited request is reported unanswered).
#[test]
fn a_response_id_with_a_true_fraction_is_no_answer() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":2.5,\"result\":{{\"accepted\":true}}}}'; \
         exec sleep 60"
    );
    let doc = check_script(&script);
    assert!(
        detail(&doc, "policy.request-answered").contains("no response"),
        "{doc:#}"
    );
    assert_eq!(status(&doc, "transport.frames-valid"), "fail", "{doc:#}");
}

/// The answer to `initialize`, pretty-printed over several lines (as `json.dumps(indent=2)`
/// writes it), for `printf '%b'`.
const INIT_PRETTY: &str = r#"{\n  "jsonrpc": "2.0",\n  "id": 1,\n  "result": {\n    "protocolVersion": "2025-06-18",\n    "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},\n    "serverInfo": {"name": "s", "version": "1"}\n  }\n}\n"#;

/// A server that pretty-prints its answer to `initialize` over 9 lines. Line framing (§4;
/// MCP's stdio transport: newline-delimited, no embedded newline) makes that a framing
/// defect, but the report said "9 frames of junk (not JSON)" and `initialize.answered`
/// waited the answer out as silence, skipping the rest. It now says one message was spread
/// over 9 lines, quoting it, that its content is otherwise a valid JSON-RPC response, and
/// reads it whole so that the run goes on.
#[test]
fn a_message_spread_over_lines_is_one_framing_failure_and_the_run_goes_on() {
    let script = format!("read l; printf '%b' '{INIT_PRETTY}'; exec sleep 60");
    let doc = check_script(&script);
    assert_eq!(status(&doc, "transport.frames-valid"), "fail", "{doc:#}");
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("spread over 9 lines"), "{d}");
    assert!(d.contains("§4"), "{d}");
    assert!(d.contains("newline"), "{d}");
    assert!(d.contains("valid JSON-RPC response (id 1)"), "{d}");
    assert!(d.contains(r#"\"jsonrpc\": \"2.0\""#), "quoted: {d}");
    assert!(!d.contains("junk"), "{d}");
    assert_eq!(status(&doc, "initialize.answered"), "pass", "{doc:#}");
}

/// A spread message whose content is no JSON-RPC either (no `jsonrpc` member) says so; and
/// one longer than the gathering bound (`spread::MAX_SPREAD_LINES`, 1,000 lines) is not
/// gathered: its lines are junk, as before, and the run does not wait for its end.
#[test]
fn a_spread_message_is_judged_on_its_content_and_gathering_is_bounded() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; printf '{{\\n  \"id\": 7\\n}}\\n'; \
         printf '[\\n'; yes '1,' | head -n 1100; printf '1]\\n'; exec sleep 60"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("spread over 3 lines"), "{d}");
    assert!(d.contains("not valid JSON-RPC either"), "{d}");
    assert!(d.contains("junk (not JSON)"), "{d}");
    assert!(!d.contains("spread over 110"), "{d}");
}

/// A server that begins a message over several lines and stalls before its end: the check
/// that waited says what it began (where the held lines were otherwise said nowhere).
#[test]
fn a_spread_message_left_unended_is_quoted_by_the_check_that_waited() {
    let script = "read l; printf '{\\n  \"jsonrpc\": \"2.0\",\\n  \"id\": 1,\\n'; exec sleep 60";
    let doc = check_script(script);
    let d = detail(&doc, "initialize.answered");
    assert!(d.contains("began one message over 3 line(s)"), "{d}");
    assert!(d.contains(r#"\"id\": 1,"#), "{d}");
}

/// A server that pings the host once initialized (MCP's `ping`: either party may send it,
/// and the receiver MUST answer with an empty result) and ends if the answer is an error, as
/// a server checking that its host is alive would. The checker, as the strict host, answered
/// `-32601` ("Method not found: ping"), where the library host answers `{}`: the server
/// ended, and everything after was reported against it. It now answers `{}`.
#[test]
fn a_ping_from_the_server_is_answered_with_an_empty_result() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":\"p-1\",\"method\":\"ping\"}}'; \
         while read l; do \
         case \"$l\" in *'\"id\":\"p-1\"'*) case \"$l\" in *'\"error\"'*) exit 3;; esac; continue;; esac; \
         id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
         [ -z \"$id\" ] && continue; \
         case \"$l\" in *featureSets/update*) r='{{\"accepted\":true}}';; *) r='{{}}';; esac; \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}}\\n' \"$id\" \"$r\"; \
         done"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "policy.request-answered");
    assert!(!d.contains("end of stream"), "{d}");
    assert_eq!(status(&doc, "policy.request-answered"), "pass", "{doc:#}");
}

/// A server that begins a message over several lines and exits before its end: the end of
/// stream quotes what it began, as a wait's end does, where the held lines were handed on at
/// the end as 3 lines of junk and the end said only "end of stream" (§4: one message per
/// line).
#[test]
fn a_spread_message_the_stream_ends_inside_is_quoted_at_the_end() {
    // initialize; notifications/initialized; then the answer to the policy is begun.
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; read l; \
         printf '{{\\n  \"jsonrpc\": \"2.0\",\\n  \"id\": 2,\\n'; exit 0"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "policy.request-answered");
    assert!(d.contains("end of stream"), "{d}");
    assert!(d.contains("began one message over 3 line(s)"), "{d}");
    assert!(d.contains(r#"\"id\": 2,"#), "{d}");
    let frames = detail(&doc, "transport.frames-valid");
    assert!(!frames.contains("junk"), "{frames}");
}

/// A server that answers the policy Request with a result over the checker's 16 MiB
/// message limit: the line is discarded unread, and the check waiting for that answer said
/// "no response within the timeout", as if the server were silent. Its envelope (read as
/// the line streams past) shows the answer's id: the check now says an answer came that it
/// could not read, naming the bound, and the verdict stays a failure.
#[test]
fn an_answer_over_the_size_limit_is_said_as_one_not_as_silence() {
    // Pings are answered; the first policy Request (with an id) gets 16 MiB and more.
    const SERVE: &str = r#"
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$l" in
    *'"featureSets/update"'*) [ -n "$id" ] && {
      printf '{"jsonrpc":"2.0","id":%s,"result":{"pad":"' "$id"
      head -c 16777300 /dev/zero | tr '\000' a; printf '"}}\n'; exec sleep 60; } ;;
    *'"ping"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done"#;
    let script = format!("read l; printf '%s\\n' '{INIT}'{SERVE}");
    // 16 MiB written by `tr` and read by a debug build took more than the 1 s the other
    // scripts get on a loaded machine (failed once at load 5.6), which the verdict is not
    // about (the answer is read whole and refused); 3 s, as the run waits per request.
    let doc = check_script_within(&script, "3");
    let c = doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "policy.request-answered"))
        .unwrap_or_else(|| panic!("{doc:#}"));
    assert_eq!(c["status"], "fail", "{doc:#}");
    let d = detail(&doc, "policy.request-answered");
    assert!(!d.contains("no response"), "{d}");
    assert!(
        d.contains("could not read") && d.contains("16777216-byte limit"),
        "the bound is named: {d}"
    );
}

/// A server that sends a valid notification over the checker's 16 MiB message limit after
/// its `initialize` answer: §4 sets no size, so the frame is not shown invalid; the checker
/// could not read it and fails `transport.frames-valid` closed, the detail naming its own
/// limit, where it called the frame "invalid JSON-RPC".
#[test]
fn a_notification_over_the_size_limit_is_said_as_the_checkers_bound() {
    const SERVE: &str = r#"
printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"'
head -c 16777300 /dev/zero | tr '\000' a; printf '"}}\n'
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$l" in
    *'"featureSets/update"'*) [ -n "$id" ] && printf '{"jsonrpc":"2.0","id":%s,"result":{"accepted":true}}\n' "$id" ;;
    *) [ -n "$id" ] && printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done"#;
    let script = format!("read l; printf '%s\\n' '{INIT}'{SERVE}");
    let doc = check_script_within(&script, "3");
    assert_eq!(status(&doc, "transport.frames-valid"), "fail", "{doc:#}");
    let d = detail(&doc, "transport.frames-valid");
    assert!(!d.contains("invalid JSON-RPC"), "{d}");
    assert!(
        d.contains("the checker's own") && d.contains("16777216-byte limit"),
        "the bound is named: {d}"
    );
}

/// A server whose `push/event` Request (id 99) is over the checker's 16 MiB message limit:
/// the line is discarded unread, and the request, whose envelope shows its method and id,
/// was never answered (a request with an id is always answered, JSON-RPC 2.0 §5: the
/// library's peer answers such a one `-32600` under its id). The checker now answers it so,
/// and still counts the frame under `transport.frames-valid`.
#[test]
fn a_request_over_the_size_limit_is_answered_under_its_id() {
    const SERVE: &str = r#"
read l
printf '{"jsonrpc":"2.0","id":99,"method":"push/event","params":{"pad":"'
head -c 16777300 /dev/zero | tr '\000' a; printf '"}}\n'
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$l" in
    *'"ping"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done"#;
    let script = format!("read l; printf '%s\\n' '{INIT}'{SERVE}");
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("oversized-request.jsonl");
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
        .arg("--transcript")
        .arg(&transcript)
        .args(["--", "sh", "-c", &script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        detail(&doc, "transport.frames-valid").contains("exceeds the 16777216-byte limit"),
        "{doc:#}"
    );
    let text = std::fs::read_to_string(&transcript).unwrap();
    let answered = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["direction"] == "sent")
        .any(|v| v["message"]["id"] == 99 && v["message"]["error"]["code"] == -32600);
    assert!(answered, "request 99 was not answered -32600: {text}");
}

/// The same request with `"id": null` (or any id that cannot be used): JSON-RPC 2.0 §5 has a
/// request whose id cannot be read answered with an error under id null, as the library's
/// peer answers it (`peer::refused`: an unusable id is answered `-32600` with `id: null`).
/// `mcpl check` read no usable id from its envelope and left it unanswered; it now answers
/// it, and still counts the frame under `transport.frames-valid`.
#[test]
fn a_request_over_the_size_limit_with_a_null_id_is_answered_under_null() {
    const SERVE: &str = r#"
read l
printf '{"jsonrpc":"2.0","id":null,"method":"push/event","params":{"pad":"'
head -c 16777300 /dev/zero | tr '\000' a; printf '"}}\n'
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$l" in
    *'"ping"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done"#;
    let script = format!("read l; printf '%s\\n' '{INIT}'{SERVE}");
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("oversized-null-request.jsonl");
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
        .arg("--transcript")
        .arg(&transcript)
        .args(["--", "sh", "-c", &script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        detail(&doc, "transport.frames-valid").contains("exceeds the 16777216-byte limit"),
        "{doc:#}"
    );
    let text = std::fs::read_to_string(&transcript).unwrap();
    let answered = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["direction"] == "sent")
        .any(|v| {
            let m = &v["message"];
            m.get("id") == Some(&Value::Null)
                && m["error"]["code"] == -32600
                && m["error"]["message"]
                    .as_str()
                    .is_some_and(|s| s.contains("16777216-byte limit"))
        });
    assert!(
        answered,
        "the null-id request was not answered -32600: {text}"
    );
}

/// Server requests the checker reads but cannot parse (JSON-RPC 2.0 §5.1: a parse error is
/// answered `-32700`): one whose id is `null`, one whose id `7` came before the error, one
/// nested past the parser with id `8`. The library's peer answers each, under id null when
/// its id cannot be told without doubt, else under that id (`peer::text`, `peer::refused`);
/// `mcpl check` read them as junk or an invalid frame and answered none. It now answers
/// them as the library does, and still reports each under `transport.frames-valid`. A
/// response that does not parse is never answered.
#[test]
fn a_request_that_does_not_parse_is_answered() {
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"push/event\",\"params\":{}{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let serve = format!(
        r#"
read l
printf '%s\n' '{{"jsonrpc":"2.0","id":null,"method":"push/event","params":{{"a":'
printf '%s\n' '{{"jsonrpc":"2.0","id":7,"method":"push/event","params":{{"a":}}}}'
printf '%s\n' '{deep}'
printf '%s\n' '{{"jsonrpc":"2.0","id":1234,"result":{{"a":}}}}'
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$l" in
    *'"ping"'*) printf '{{"jsonrpc":"2.0","id":%s,"result":{{}}}}\n' "$id" ;;
  esac
done"#
    );
    let script = format!("read l; printf '%s\\n' '{INIT}'{serve}");
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("unparsed-request.jsonl");
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
        .arg("--transcript")
        .arg(&transcript)
        .args(["--", "sh", "-c", &script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let frames = detail(&doc, "transport.frames-valid");
    assert!(
        frames.contains("3 frames of junk") && frames.contains("1 frames of invalid"),
        "{frames}"
    );
    let text = std::fs::read_to_string(&transcript).unwrap();
    let sent: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["direction"] == "sent")
        .map(|v| v["message"].clone())
        .filter(|m| m.get("method").is_none())
        .collect();
    let answered = |id: Value, code: i64| {
        sent.iter()
            .any(|m| m.get("id") == Some(&id) && m["error"]["code"] == code)
    };
    assert!(answered(Value::Null, -32700), "id null: {text}");
    assert!(answered(serde_json::json!(7), -32700), "id 7: {text}");
    assert!(answered(serde_json::json!(8), -32600), "id 8: {text}");
    assert!(
        !answered(serde_json::json!(1234), -32700),
        "a response: {text}"
    );
    let nulls = sent
        .iter()
        .filter(|m| m.get("id") == Some(&Value::Null))
        .count();
    assert_eq!(nulls, 1, "one answer under id null: {text}");
}

/// JSON-RPC 2.0 §6: each entry of a batch that is no object (`1`, `"x"`) is an invalid
/// Request, answered `-32600` under id null within the batch's answer, as the library's
/// peer answers it (`peer::reader`: a value that is no object counts as a request). `mcpl
/// check` reported them under `transport.frames-valid` and answered only the `ping` beside
/// them; it now answers all three, and still reports the two.
#[test]
fn a_batch_entry_that_is_no_object_is_answered() {
    let script = format!(
        r#"read l; printf '%s\n' '{INIT}'; read l
printf '%s\n' '[1,{{"jsonrpc":"2.0","id":"p","method":"ping"}},"x"]'
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  [ -n "$id" ] && printf '{{"jsonrpc":"2.0","id":%s,"result":{{}}}}\n' "$id"
done"#
    );
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("batch-no-object.jsonl");
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
        .arg("--transcript")
        .arg(&transcript)
        .args(["--", "sh", "-c", &script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let frames = detail(&doc, "transport.frames-valid");
    assert!(frames.contains("2 frames of invalid"), "{frames}");
    let text = std::fs::read_to_string(&transcript).unwrap();
    let answer = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["direction"] == "sent")
        .map(|v| v["message"].clone())
        .find(|m| m.is_array())
        .unwrap_or_else(|| panic!("no batch answer: {text}"));
    let answers = answer.as_array().unwrap();
    assert_eq!(answers.len(), 3, "{answer}");
    let nulls = answers
        .iter()
        .filter(|a| a.get("id") == Some(&Value::Null) && a["error"]["code"] == -32600)
        .count();
    assert_eq!(nulls, 2, "{answer}");
}

/// RFC 8259 §8.1: JSON text is UTF-8, so a server request with a byte that is no UTF-8 does
/// not parse, and is answered as one that does not parse is (JSON-RPC 2.0 §5.1: `-32700`),
/// as the library's peer answers it (`peer::oversized`, `Discarded::not_text`): under its
/// id when its envelope, read past the bad byte, tells it without doubt (`9`), else under
/// id null (`"id": null`). `mcpl check` reported each as "a frame that is not text" and
/// answered none; it now answers both. A line of no UTF-8 that does not begin as a message
/// is still reported only.
#[test]
fn a_request_that_is_no_utf8_is_answered() {
    let script = format!(
        r#"read l; printf '%s\n' '{INIT}'; read l
printf '{{"jsonrpc":"2.0","id":9,"method":"push/event","params":{{"a":"\377"}}}}\n'
printf '{{"jsonrpc":"2.0","id":null,"method":"push/event","params":{{"a":"\377"}}}}\n'
printf '\377\376 not a message\n'
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$l" in
    *'"method"'*) [ -n "$id" ] && printf '{{"jsonrpc":"2.0","id":%s,"result":{{}}}}\n' "$id" ;;
  esac
done"#
    );
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("not-utf8.jsonl");
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
        .arg("--transcript")
        .arg(&transcript)
        .args(["--", "sh", "-c", &script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let frames = detail(&doc, "transport.frames-valid");
    assert!(frames.contains("3 frames of invalid"), "{frames}");
    let text = std::fs::read_to_string(&transcript).unwrap();
    let sent: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["direction"] == "sent")
        .map(|v| v["message"].clone())
        .filter(|m| m.get("method").is_none())
        .collect();
    let parse_errors = |id: &Value| {
        sent.iter()
            .filter(|m| m.get("id") == Some(id) && m["error"]["code"] == -32700)
            .count()
    };
    assert_eq!(parse_errors(&serde_json::json!(9)), 1, "id 9: {text}");
    assert_eq!(parse_errors(&Value::Null), 1, "id null: {text}");
}

/// MCP reserves `_meta` for metadata a party attaches to a message, not the result itself:
/// a server whose `tools/list` result carries `_meta` with a value of its own each time (the
/// id it answers, as a server tracing its answers writes it) answers the request with an
/// unknown params member as without it. `rpc.unknown-members-ignored` compared the two
/// results whole, `_meta` included, and failed this conforming server (§8).
#[test]
fn meta_of_its_own_per_answer_is_not_another_result() {
    let init = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"experimental":{"mcpl":{"version":"0.5"}}},"serverInfo":{"name":"s","version":"1"}}}"#;
    let script = format!(
        r#"read l; printf '%s\n' '{init}'
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$l" in
    *'"tools/list"'*) printf '{{"jsonrpc":"2.0","id":%s,"result":{{"tools":[],"_meta":{{"answers":%s}}}}}}\n' "$id" "$id" ;;
    *'"featureSets/update"'*) printf '{{"jsonrpc":"2.0","id":%s,"result":{{"accepted":true}}}}\n' "$id" ;;
    *'"ping"'*) printf '{{"jsonrpc":"2.0","id":%s,"result":{{}}}}\n' "$id" ;;
    *) printf '{{"jsonrpc":"2.0","id":%s,"error":{{"code":-32601,"message":"no"}}}}\n' "$id" ;;
  esac
done"#
    );
    let doc = check_script(&script);
    let c = doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "rpc.unknown-members-ignored"))
        .unwrap_or_else(|| panic!("{doc:#}"));
    assert_eq!(c["status"], "pass", "{c:#}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("tools/list"),
        "{c:#}"
    );
}

/// Runs [`check_script`] with a transcript: its report and every message the checker sent.
fn check_script_sent(script: &str, name: &str) -> (Value, Vec<Value>) {
    let dir = std::env::temp_dir().join(format!("mcpl-wire-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.jsonl");
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
        .args(["--transcript", path.to_str().unwrap()])
        .args(["--", "sh", "-c", script])
        .timeout(GUARD)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", out.stdout));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let sent = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["direction"] == "sent")
        .map(|l| l["message"].clone())
        .collect();
    (doc, sent)
}

/// A server's loop answering each request of the checker (`{}`, the policy accepted),
/// after `before` was written once the checker's `initialize` was answered.
fn answering_server(before: &str) -> String {
    format!(
        "read l; printf '%s\\n' '{INIT}'; {before} \
         while read l; do \
         id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
         [ -z \"$id\" ] && continue; \
         case \"$l\" in *featureSets/update*) r='{{\"accepted\":true}}';; *) r='{{}}';; esac; \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}}\\n' \"$id\" \"$r\"; \
         done"
    )
}

/// A server that sends an object with an id and neither a `method` nor a `result` or an
/// `error` (no Request nor Response object, JSON-RPC 2.0 §4, §5) under an id the checker
/// never used: the checker answers it `-32600` under that id, once, as the library's peer
/// does (`mcpl::jsonrpc::invalid_then`); it answered nothing.
#[test]
fn an_id_with_no_method_nor_outcome_is_answered_as_the_peer_answers_it() {
    let script = answering_server(r#"printf '%s\n' '{"jsonrpc":"2.0","id":"s-1","params":{}}';"#);
    let (doc, sent) = check_script_sent(&script, "bare-id");
    let answers: Vec<_> = sent.iter().filter(|m| m["id"] == "s-1").collect();
    assert_eq!(answers.len(), 1, "{sent:#?}\n{doc:#}");
    assert_eq!(answers[0]["error"]["code"], -32600, "{}", answers[0]);
}

/// A server that answers each request of the checker after `initialize` with an object under
/// that request's id and neither a `result` nor an `error`, text the parser refuses (a
/// number out of range): the unusable answer to the checker's own request, which the
/// library's peer never answers back. The checker answered it `-32700` under its own
/// request's id, which could end a request of the server's under the same number.
#[test]
fn an_unparsable_bare_answer_to_our_request_is_not_answered_back() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; \
         while read l; do \
         id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
         [ -z \"$id\" ] && continue; \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%s,\"x\":1e400}}\\n' \"$id\"; \
         done"
    );
    let (doc, sent) = check_script_sent(&script, "bare-unparsable");
    let errors: Vec<_> = sent.iter().filter(|m| m.get("error").is_some()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    assert!(
        sent.len() > 1,
        "the checker went on past initialize: {sent:#?}"
    );
}

/// A server that writes two messages on one line (MCP stdio: one message per line) fails
/// `transport.frames-valid`: the checker flags the framing, whatever the library's peer
/// recovers of it (`mcpl::jsonrpc::several_values`).
#[test]
fn two_messages_on_one_line_fail_the_framing_check() {
    let two = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"a"}} {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"b"}}"#;
    let script = answering_server(&format!("printf '%s\\n' '{two}';"));
    let doc = check_script(&script);
    assert_eq!(status(&doc, "transport.frames-valid"), "fail", "{doc:#}");
}

/// MCP's base protocol: a request id is not reused while its request is in flight (JSON-RPC
/// 2.0 §5 pairs an answer with its request by id alone). A server sending two `ping`s under
/// one id in one batch, the first unanswered when the second is read, fails
/// `rpc.in-flight-ids-unique`, and the second is refused `-32600` (as the library's peer and
/// host refuse it), never run; the first is answered. Before, nothing failed (only
/// `rpc.request-ids-unique` warned) and both were answered `{}` under the one id.
#[test]
fn a_request_under_an_id_still_in_flight_fails_and_is_refused() {
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seen = dir.join("in-flight-seen.txt");
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; \
         printf '%s\\n' '[{{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}},{{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}}]'; \
         exec cat > '{}'",
        seen.display()
    );
    let doc = check_script(&script);
    assert_eq!(status(&doc, "rpc.in-flight-ids-unique"), "fail", "{doc:#}");
    let d = detail(&doc, "rpc.in-flight-ids-unique");
    assert!(
        d.starts_with("1 of 2 request(s)") && d.contains(r#""p""#),
        "{d}"
    );
    let written = std::fs::read_to_string(&seen).unwrap();
    let batch: Vec<Value> = written
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.as_array().cloned())
        .unwrap_or_else(|| panic!("no batch answer in {written}"));
    assert_eq!(batch.len(), 2, "{batch:?}");
    assert_eq!(batch[0]["result"], serde_json::json!({}), "{batch:?}");
    assert_eq!(batch[1]["error"]["code"], -32600, "{batch:?}");
    assert!(batch.iter().all(|a| a["id"] == "p"), "{batch:?}");
}

/// F8: two `ping`s under one id written back to back on two lines, both received before
/// the checker wrote its answer to the first: the second is still in flight by the reading
/// of JSON-RPC 2.0 §4 and MCPL §5 (its bytes arrived before the answer to the earlier one
/// was written), so `rpc.in-flight-ids-unique` fails and the second is refused `-32600`,
/// as `mcpl check-host` judges the same input. The checker had answered the first before it
/// read the second, and passed.
#[test]
fn two_requests_under_one_id_received_before_either_answer_fail() {
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seen = dir.join("in-flight-lines-seen.txt");
    let ping = r#"{"jsonrpc":"2.0","id":"r","method":"ping"}"#;
    let script = format!(
        "read l; printf '%s\\n%s\\n%s\\n' '{INIT}' '{ping}' '{ping}'; exec cat > '{}'",
        seen.display()
    );
    let doc = check_script(&script);
    assert_eq!(status(&doc, "rpc.in-flight-ids-unique"), "fail", "{doc:#}");
    let d = detail(&doc, "rpc.in-flight-ids-unique");
    assert!(
        d.starts_with("1 of 2 request(s)") && d.contains(r#""r""#),
        "{d}"
    );
    let written = std::fs::read_to_string(&seen).unwrap();
    let answers: Vec<Value> = written
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["id"] == "r")
        .collect();
    assert_eq!(answers.len(), 2, "{written}");
    assert_eq!(answers[0]["result"], serde_json::json!({}), "{answers:?}");
    assert_eq!(answers[1]["error"]["code"], -32600, "{answers:?}");
}

/// The in-flight identity is the library's (`RequestId::identity`: a number by its value),
/// not the id's text: a `ping` under `5` and one under `5.0` written back to back, and
/// `0` and `-0.0` in one batch, are each a second request under an id in flight, so
/// `rpc.in-flight-ids-unique` fails (2 of 4) and each second one is refused `-32600` under
/// its own id as written (JSON-RPC 2.0 §5). Before, only a repeat of the same text counted.
#[test]
fn a_request_under_the_same_numeric_value_in_flight_fails() {
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seen = dir.join("in-flight-value-seen.txt");
    let five = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;
    let five_f = r#"{"jsonrpc":"2.0","id":5.0,"method":"ping"}"#;
    let zeros =
        r#"[{"jsonrpc":"2.0","id":0,"method":"ping"},{"jsonrpc":"2.0","id":-0.0,"method":"ping"}]"#;
    let script = format!(
        "read l; printf '%s\\n%s\\n%s\\n%s\\n' '{INIT}' '{five}' '{five_f}' '{zeros}'; \
         exec cat > '{}'",
        seen.display()
    );
    let doc = check_script(&script);
    assert_eq!(status(&doc, "rpc.in-flight-ids-unique"), "fail", "{doc:#}");
    let d = detail(&doc, "rpc.in-flight-ids-unique");
    assert!(
        d.starts_with("2 of 4 request(s)") && d.contains("5.0"),
        "{d}"
    );
    let written = std::fs::read_to_string(&seen).unwrap();
    let frames: Vec<Value> = written
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    // `serde_json`'s equality keeps `5.0` (a double) apart from `5` (an integer).
    let as_written = |id: &str| serde_json::from_str::<Value>(id).unwrap();
    let refused = |id: &str| {
        frames
            .iter()
            .flat_map(|f| f.as_array().cloned().unwrap_or_else(|| vec![f.clone()]))
            .any(|a| a["id"] == as_written(id) && a["error"]["code"] == -32600)
    };
    assert!(refused("5.0") && refused("-0.0"), "{written}");
    assert!(!refused("5") && !refused("0"), "{written}");
}

/// The same id used again once its request was answered is MCP's session rule broken
/// (`rpc.request-ids-unique` warns), not a reuse in flight: the server pings under `q`,
/// reads the answer, and pings under `q` again; `rpc.in-flight-ids-unique` passes and the
/// second ping is answered `{}`.
#[test]
fn an_id_used_again_after_its_answer_is_no_reuse_in_flight() {
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"ping\"}}'; \
         while read l; do case \"$l\" in *'\"id\":\"q\"'*) break;; esac; done; \
         printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"ping\"}}'; \
         exec cat > /dev/null"
    );
    let doc = check_script(&script);
    assert_eq!(status(&doc, "rpc.in-flight-ids-unique"), "pass", "{doc:#}");
    assert_eq!(status(&doc, "rpc.request-ids-unique"), "warn", "{doc:#}");
}

/// A batch past the library's `peer::DEFAULT_MAX_BATCH_ENTRIES` (1,024): a library host
/// refuses it whole, one `-32600` under id null with `data: {limit, count}`, no entry
/// handled. The checker, a strict host, handled every entry and built every answer (hunt:
/// 100,000 pings in one batch took it past 220 MiB); it now refuses it as the library does
/// and says so under `transport.frames-valid`, as it says its other bounds. A batch of
/// 1,024 is still answered entry by entry.
#[test]
fn a_batch_past_the_library_bound_is_refused_whole() {
    let dir = std::env::temp_dir().join(format!("mcpl-check-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for count in [1025usize, 1024] {
        let seen = dir.join(format!("batch-{count}.txt"));
        let pings: Vec<String> = (0..count)
            .map(|i| format!(r#"{{"jsonrpc":"2.0","id":"b{i}","method":"ping"}}"#))
            .collect();
        let script = format!(
            "read l; printf '%s\\n' '{INIT}'; printf '%s\\n' '[{}]'; exec cat > '{}'",
            pings.join(","),
            seen.display()
        );
        let doc = check_script(&script);
        let written = std::fs::read_to_string(&seen).unwrap();
        let answers: Vec<Value> = written
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("method").is_none())
            .collect();
        if count == 1025 {
            let first = answers.first().map(Value::to_string).unwrap_or_default();
            assert_eq!(answers.len(), 1, "{first:.300}");
            assert_eq!(answers[0]["id"], Value::Null, "{first:.300}");
            assert_eq!(answers[0]["error"]["code"], -32600, "{first:.300}");
            assert_eq!(answers[0]["error"]["data"]["limit"], 1024, "{first:.300}");
            assert_eq!(answers[0]["error"]["data"]["count"], 1025, "{first:.300}");
            let d = detail(&doc, "transport.frames-valid");
            assert!(d.contains("batch of 1025 entries"), "{d}");
        } else {
            let batch = answers.iter().find_map(Value::as_array);
            assert_eq!(batch.map(Vec::len), Some(1024), "{written:.400}");
        }
    }
}

/// The awaited answer inside a batch refused whole for its size ends its request as an
/// unusable answer, said where the request is judged, not waited out as silence.
#[test]
fn an_answer_inside_a_batch_refused_for_its_size_is_said_not_waited_out() {
    let pings: Vec<String> = (0..1024)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":"b{i}","method":"ping"}}"#))
        .collect();
    // Each request is answered (a ping with `{}`) until the policy, whose answer goes into
    // the batch.
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; \
         while read l; do \
         id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
         [ -z \"$id\" ] && continue; \
         case \"$l\" in *featureSets/update*) \
         printf '[%s,{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{{\"accepted\":true}}}}]\\n' '{}' \"$id\"; \
         exec sleep 60;; esac; \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{{}}}}\\n' \"$id\"; \
         done",
        pings.join(",")
    );
    let doc = check_script(&script);
    let d = detail(&doc, "policy.request-answered");
    assert!(d.contains("batch of 1025 entries"), "{d}");
    assert!(!d.contains("within the timeout"), "{d}");
}

/// A line over the checker's 16 MiB limit that holds a second message after the first (MCP
/// stdio: one message per line): the library's peer refuses each message of such a line as
/// if it had come alone (`FrameReader::discarded_rest`), so the `ping` after the oversized
/// push is answered `-32600` under its id, as the push is. `mcpl check` answered the first
/// only, and the `ping` was never answered.
#[test]
fn each_request_of_an_oversized_line_is_answered_under_its_id() {
    const SERVE: &str = r#"
read l
printf '{"jsonrpc":"2.0","id":99,"method":"push/event","params":{"pad":"'
head -c 16777300 /dev/zero | tr '\000' a
printf '"}} {"jsonrpc":"2.0","id":"p2","method":"ping"}\n'
exec cat > /dev/null"#;
    let script = format!("read l; printf '%s\\n' '{INIT}'{SERVE}");
    let (doc, sent) = check_script_sent(&script, "oversized-several");
    for id in [Value::from(99), Value::from("p2")] {
        let answered = sent
            .iter()
            .any(|m| m["id"] == id && m["error"]["code"] == -32600);
        assert!(answered, "{id} was not answered -32600: {sent:#?}");
    }
    let d = detail(&doc, "transport.frames-valid");
    assert!(d.contains("2 messages"), "{d}");
}

/// The answer to the checker's policy Request written after an oversized notification on
/// the same line: the library's peer fails that request at once, its answer discarded with
/// the line; `mcpl check` waited it out as silence ("no response"). It now says it is an
/// answer it could not read, naming the bound.
#[test]
fn an_answer_on_an_oversized_line_is_said_as_one_not_as_silence() {
    const SERVE: &str = r#"
while read l; do
  id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$l" in
    *'"featureSets/update"'*) [ -n "$id" ] && {
      printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"pad":"'
      head -c 16777300 /dev/zero | tr '\000' a
      printf '"}} {"jsonrpc":"2.0","id":%s,"result":{"accepted":true}}\n' "$id"
      exec sleep 60; } ;;
    *'"ping"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
  esac
done"#;
    let script = format!("read l; printf '%s\\n' '{INIT}'{SERVE}");
    let doc = check_script(&script);
    assert_eq!(status(&doc, "policy.request-answered"), "fail", "{doc:#}");
    let d = detail(&doc, "policy.request-answered");
    assert!(!d.contains("no response"), "{d}");
    assert!(
        d.contains("could not read") && d.contains("16777216-byte limit"),
        "{d}"
    );
}

/// A line of two whole messages of ordinary size: the library's peer reads each alone
/// (`mcpl::jsonrpc::several_values`), so both `ping`s are answered `{}` under their ids.
/// `mcpl check` read the line as junk and answered the first `-32700`, the second nothing.
/// It now answers each as the peer does, and still fails the framing.
#[test]
fn each_request_of_a_line_of_several_is_answered() {
    let two =
        r#"{"jsonrpc":"2.0","id":"a","method":"ping"} {"jsonrpc":"2.0","id":"b","method":"ping"}"#;
    let script = answering_server(&format!("printf '%s\\n' '{two}';"));
    let (doc, sent) = check_script_sent(&script, "several-pings");
    for id in ["a", "b"] {
        let answers: Vec<_> = sent.iter().filter(|m| m["id"] == id).collect();
        assert_eq!(answers.len(), 1, "{id}: {sent:#?}");
        assert_eq!(answers[0]["result"], serde_json::json!({}), "{id}");
    }
    assert_eq!(status(&doc, "transport.frames-valid"), "fail", "{doc:#}");
}

/// A server that writes a line beginning with a batch of two requests the parser refuses
/// only for what follows it (`] x`): the checker answers each of the batch's requests
/// `-32700` under its id in one array, as the library's peer answers it
/// (`mcpl::jsonrpc::ParseError::owed_answers`; JSON-RPC 2.0 §5, §6), where it answered one
/// `-32700` under id null. What the checker writes back is kept by the script in a file.
#[test]
fn a_batch_refused_for_what_follows_it_is_answered_under_each_id() {
    let kept = std::env::temp_dir().join(format!("mcpl-check-wire-batch-{}", std::process::id()));
    let _ = std::fs::remove_file(&kept);
    let batch = r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":"b","method":"ping"}] x"#;
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; read l; printf '%s\\n' '{batch}'; \
         while read l; do printf '%s\\n' \"$l\" >> '{}'; done",
        kept.display()
    );
    check_script(&script);
    let text = std::fs::read_to_string(&kept).unwrap_or_default();
    let _ = std::fs::remove_file(&kept);
    let answers: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("method").is_none())
        .collect();
    let batch = answers
        .iter()
        .find_map(|v| v.as_array())
        .unwrap_or_else(|| panic!("no array answer in {text}"));
    let ids: Vec<&Value> = batch.iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, [&Value::from("a"), &Value::from("b")], "{text}");
    assert!(batch.iter().all(|r| r["error"]["code"] == -32700), "{text}");
    assert!(
        !answers.iter().any(|v| v.get("id") == Some(&Value::Null)),
        "{text}"
    );
}

/// An answer to the checker's request past the first 1,024 messages of one line (the
/// library's `peer::DEFAULT_MAX_BATCH_ENTRIES`; MCP's stdio framing is one message per
/// line) is refused unread, as the library's peer refuses it, and the request it answers
/// ends at once, said in the peer's words ("more than 1024 messages"). It had waited out
/// the timeout and been reported as silence.
#[test]
fn an_answer_past_the_messages_of_one_line_ends_its_wait_at_once() {
    // Every request answered `{}`; the policy Request's answer comes after 1,024
    // notifications on its line.
    let notes = r#"{"jsonrpc":"2.0","method":"n"} "#.repeat(1024);
    let script = format!(
        "read l; printf '%s\\n' '{INIT}'; \
         while read l; do \
         id=$(printf '%s' \"$l\" | sed -n 's/^{{\"id\":\\([0-9]*\\),.*/\\1/p'); \
         [ -z \"$id\" ] && continue; \
         case \"$l\" in *featureSets/update*) \
         printf '%s{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{{}}}}\\n' '{notes}' \"$id\"; \
         exec sleep 60;; esac; \
         printf '{{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{{}}}}\\n' \"$id\"; \
         done"
    );
    let doc = check_script(&script);
    let d = detail(&doc, "policy.request-answered");
    assert!(!d.contains("no response"), "{d}");
    assert!(d.contains("more than 1024 messages"), "{d}");
}

/// An `initialize` answer (it decides authority, §5.4) naming a member twice, in a batch
/// whose earlier entry repeats a name too: the answer is judged on its own and refused
/// whole, as the library's peer refuses it (`initialize.answered` fails, naming the
/// answer's repeat). The checker saw only the frame's first repeat, in the harmless
/// entry, and read the answer as its last copy.
#[test]
fn a_repeat_in_the_answer_behind_a_repeat_elsewhere_in_its_batch_is_refused() {
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","level":"info","data":"x"}}"#;
    let init = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"mcpl":{"version":"0.5"}}},"serverInfo":{"name":"s","name":"t","version":"1"}}}"#;
    let script = format!("read l; printf '%s\\n' '[{note},{init}]'; exec cat > /dev/null");
    let doc = check_script(&script);
    assert_eq!(status(&doc, "initialize.answered"), "fail", "{doc:#}");
    let d = detail(&doc, "initialize.answered");
    assert!(
        d.contains(r#""name""#) && d.contains("decides authority"),
        "{d}"
    );
}

/// A server whose `initialize` answer shows its id and then nests past what a parser
/// takes: the wait ends at once, the answer said as one that could not be read and why (the
/// library's peer fails its request so, `peer::refused`), not "no response within the
/// timeout" after waiting it out.
#[test]
fn an_answer_nested_past_the_parser_is_said_at_once() {
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let script = format!("read l; printf '%s\\n' '{deep}'; exec sleep 60");
    let doc = check_script(&script);
    let d = detail(&doc, "initialize.answered");
    assert!(
        d.contains("could not read") && d.contains("nested deeper than 128 levels"),
        "{d}"
    );
    assert!(!d.contains("no response"), "{d}");
}

/// A server's request whose id is written `500.0` (or `2.5`): JSON-RPC 2.0 §4 says an id
/// SHOULD NOT have a fraction, a SHOULD NOT, so it is a valid request. The checker refused it
/// `-32600` under id null and failed `transport.frames-valid`; it now answers it under the
/// same value (§5) and warns there, naming the id, while the run judges as ever.
#[test]
fn a_server_request_with_a_fractional_id_is_answered_under_it_with_a_warning() {
    for (written, same) in [("500.0", json!(500.0)), ("2.5", json!(2.5))] {
        let before = format!(
            "printf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":{written},\"method\":\"ping\"}}';"
        );
        let (doc, sent) = check_script_sent(&answering_server(&before), "fractional");
        let answer = sent
            .iter()
            .find(|m| m.get("method").is_none() && m["id"] == same)
            .unwrap_or_else(|| panic!("{written}: no answer under it in {sent:#?}"));
        assert_eq!(answer["result"], json!({}), "{answer}");
        assert!(
            !sent
                .iter()
                .any(|m| m["id"].is_null() && m.get("error").is_some()),
            "{written}: refused under null: {sent:#?}"
        );
        assert_eq!(status(&doc, "transport.frames-valid"), "warn", "{doc:#}");
        let d = detail(&doc, "transport.frames-valid");
        assert!(d.contains(&format!("id {written} on ping")), "{d}");
        assert!(d.contains("§4"), "{d}");
        assert_eq!(status(&doc, "policy.request-answered"), "pass", "{doc:#}");
    }
}
