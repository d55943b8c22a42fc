//! The owner of a connection that answers the policy itself (`Peer::take_policy_past_busy`)
//! told of a policy message refused unread (§6.7, §6.4), over a real line transport, every
//! byte of the other side written here: in wire order, and never lost to a full incoming
//! queue.

use super::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A refused batch (junk after it on its line) holding the policy Request and the answer
/// to a request of ours sent in order, read while the incoming queue (capacity 1) is full:
/// the owner is told of the unread policy before that request fails (the batch's own
/// answer first, then each of ours at its place), and nothing stays counted in the inbox
/// once all is received. Before, the notice was dropped when the failure found the queue
/// full too (the grant kept, the inbox +1 for good), and came after it otherwise.
#[tokio::test]
async fn a_refused_batch_with_the_policy_is_told_before_its_failures_and_counted_once() {
    let config = PeerConfig {
        incoming_capacity: 1,
        request_timeout: None,
        ..PeerConfig::default()
    };
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (r, w) = tokio::io::split(ours);
    let (peer, mut incoming) = Peer::new(Transport::lines(r, w, "pipe"), config);
    peer.take_policy_past_busy();
    let (raw_r, mut raw_w) = tokio::io::split(theirs);
    let mut lines = BufReader::new(raw_r).lines();
    let id = peer.send_request("ask", None, |_| {}).await.unwrap();
    let sent: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(sent["id"], json!(id));
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","id":9,"method":"featureSets/update","params":{{"effectiveCapabilities":[]}}}},{{"jsonrpc":"2.0","id":{},"result":{{}}}}]x"#,
        sent["id"]
    );
    let fill = json!({"jsonrpc": "2.0", "method": "fill"});
    let end = json!({"jsonrpc": "2.0", "method": "end"});
    let text = format!("{fill}\n{batch}\n{end}\n");
    raw_w.write_all(text.as_bytes()).await.unwrap();
    // The batch's answer written: the reader has taken it (nothing of it waits before).
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer[0]["id"], 9, "{answer}");
    assert_eq!(answer[0]["error"]["data"]["applied"], false, "{answer}");
    let mut got = Vec::new();
    while got.last().map(String::as_str) != Some("message end") {
        got.push(match incoming.recv_typed().await {
            Some(Typed::Ordered(Ordered::Message(m))) => format!("message {}", m.method()),
            Some(Typed::Ordered(Ordered::Response(r))) => {
                format!("response {:?} {}", r.id, r.outcome.is_err())
            }
            Some(Typed::PolicyUnread(form)) => format!("policy unread {form:?}"),
            Some(Typed::Lifecycle(_)) => "lifecycle".into(),
            None => panic!("the connection ended: {got:?}"),
        });
    }
    assert_eq!(
        got,
        [
            "message fill".to_owned(),
            "policy unread Request".to_owned(),
            format!("response {:?} true", Some(id)),
            "message end".to_owned(),
        ]
    );
    assert_eq!(incoming.shared.inbox.load(Ordering::Relaxed), 0);
}
