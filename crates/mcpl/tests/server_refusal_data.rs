//! What a `-32002` refusal of a host's request names in `data.capability` (§5.4, §14.1's
//! error table): the path the refused call needed, never one it did not. Raw JSON lines
//! over a real pipe against a `Server`.
#![cfg(feature = "runtime")]

use mcpl::capability::Capability;
use mcpl::protocol::hooks::BeforeInferenceResult;
use mcpl::server::{Server, Session};
use mcpl::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A write-only hook (§15.2's body status line): its set uses `inject.system` only.
fn write_only() -> Server {
    Server::builder("status", "1")
        .feature_set("status.line", "Status", &[Capability::InjectSystem])
        .on_before_inference("status.line", |_g, _p| async {
            Ok(BeforeInferenceResult::default())
        })
        .build()
        .expect("builds")
}

/// The answers to `frames`, sent after `initialize` (MCPL 0.5) and
/// `notifications/initialized`, one per frame with an id, in order.
async fn answers(server: Server, frames: &[Value]) -> Vec<Value> {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, mut aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let _session: Session = server.start(Transport::lines(br, bw, "test"));
    let mut lines = BufReader::new(ar).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"experimental": {"mcpl": {"version": "0.5"}}},
                   "clientInfo": {"name": "host", "version": "0"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let mut out = Vec::new();
    for f in [&init, &initialized].into_iter().chain(frames) {
        aw.write_all(format!("{f}\n").as_bytes()).await.unwrap();
        if f.get("id").is_some() {
            let line = lines.next_line().await.unwrap().expect("an answer");
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["id"], f["id"], "{v}");
            out.push(v);
        }
    }
    out.remove(0);
    out
}

fn policy(id: u64, grant: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "featureSets/update",
           "params": {"effectiveCapabilities": grant}})
}

fn hook(id: u64, user_message: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "context/beforeInference",
           "params": {"inferenceId": "i", "conversationId": "c", "turnIndex": 0,
                      "userMessage": user_message}})
}

/// §10.1: a hook call with `userMessage: null` needs any inject leaf or `observe`; refused
/// once every hook leaf is revoked, its `-32002` names the leaf this server's hook uses
/// (`inject.system`), not `observe`, which the call did not need (granting it would hand the
/// server the user's text, §15.2). Before, `data.capability` named `observe`, the first of
/// the method's alternatives, whatever the server was for.
#[tokio::test]
async fn s10_1_a_hook_refused_without_user_text_names_the_leaf_the_hook_uses() {
    let got = answers(
        write_only(),
        &[
            policy(1, json!(["contextHooks.beforeInference.inject.system"])),
            policy(2, json!([])),
            hook(3, Value::Null),
        ],
    )
    .await;
    let refused = &got[2];
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert_eq!(
        refused["error"]["data"]["capability"], "contextHooks.beforeInference.inject.system",
        "{refused}"
    );
}

/// The same call with the user's text needs `observe` (§10.1: `userMessage` is `null`
/// whenever observe is not granted): that is what its refusal names.
#[tokio::test]
async fn s10_1_a_hook_refused_with_user_text_names_observe() {
    let got = answers(
        write_only(),
        &[policy(1, json!([])), hook(2, json!("hello"))],
    )
    .await;
    let refused = &got[1];
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert_eq!(
        refused["error"]["data"]["capability"], "contextHooks.beforeInference.observe",
        "{refused}"
    );
}

/// §5.3, §6.7: a policy list written `null` is refused (`-32602`), not read as absent: read
/// so, `enabled: null` would enable every declared set where the host may have meant none
/// (fail closed). The refusal says that is why, and how to leave the member out; it said
/// only "must be an array of strings", which a host writing `null` for "not set" reads as
/// a type error it did not make.
#[tokio::test]
async fn s6_7_a_policy_list_written_null_is_refused_saying_so() {
    for field in [
        "enabled",
        "disabled",
        "deniedCapabilities",
        "effectiveCapabilities",
    ] {
        let mut p = policy(1, json!(["tools"]));
        p["params"][field] = Value::Null;
        let got = answers(write_only(), &[p]).await;
        let refused = &got[0];
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(
            refused["error"]["data"]["reason"], "not_string_array",
            "{refused}"
        );
        let said = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains(field), "{said}");
        assert!(said.contains("`null`"), "{said}");
        assert!(said.contains("omit"), "{said}");
    }
}
