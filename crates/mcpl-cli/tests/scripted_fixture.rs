//! The scripted server `mcpl check`'s tests run against holds the host to its advertisement
//! (§5.4): a policy Request granting, by name, a path its `initialize` did not advertise is
//! refused, so a checker that granted beyond it would show in every test using the fixture.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcpl-scripted-server");

/// Sends `messages` to the fixture in `mode`, closes its input (it then exits) and returns
/// the lines it wrote, parsed.
fn exchange(mode: &str, messages: &[Value]) -> Vec<Value> {
    let mut child = Command::new(FIXTURE)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for m in messages {
        writeln!(stdin, "{m}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The answer to the policy Request (id 2) granting `granted` after `initialize`.
fn policy_answer(mode: &str, granted: &[&str]) -> Value {
    let lines = exchange(
        mode,
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities":
                       {"experimental": {"mcpl": {"version": "0.5"}}}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "featureSets/update",
                   "params": {"effectiveCapabilities": granted, "enabled": ["demo.push"]}}),
        ],
    );
    lines
        .into_iter()
        .find(|l| l["id"] == json!(2) && l.get("method").is_none())
        .expect("the policy Request is answered")
}

#[test]
fn s5_4_the_scripted_server_refuses_a_grant_beyond_its_advertisement() {
    // `good` advertises no `channels.streaming`; `unadvertised-register` no `channels.register`.
    for (mode, beyond) in [
        ("good", "channels.streaming"),
        ("unadvertised-register", "channels.register"),
    ] {
        let answer = policy_answer(mode, &["pushEvents", beyond]);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            answer["error"]["code"] == json!(-32602) && message.contains(beyond),
            "{mode}: {answer}"
        );
    }
    // What it advertises (`tools` from its MCP capabilities included) is taken.
    let answer = policy_answer("good", &["pushEvents", "tools"]);
    assert_eq!(answer["result"]["accepted"], json!(true), "{answer}");
}
