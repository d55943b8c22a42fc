//! A request id stays in flight until its answer is written (MCP base protocol: an id is not
//! reused while its request is in flight; JSON-RPC 2.0 §5), and what is no request is never
//! answered under an id that may name another: over a real line transport (an in-memory
//! pipe), every byte written by the test.
#![cfg(feature = "runtime")]

use mcpl::peer::{Diagnostic, IncomingMessage, PeerConfig, PeerError};
use serde_json::{json, Value};

#[path = "support/raw.rs"]
mod raw;
use raw::{answer_all, raw_peer, Raw, GUARD};

fn config() -> PeerConfig {
    PeerConfig {
        request_timeout: None,
        ..PeerConfig::default()
    }
}

/// Sends `line`, then a `sync` request the application answers: every line the peer wrote
/// before that answer.
async fn exchange(raw: &mut Raw, line: &str) -> Vec<Value> {
    raw.send(line).await;
    raw.before_sync().await
}

/// MCP cancellation is advisory, and the receiver may still answer (JSON-RPC 2.0 §4: every
/// request is answered): a cancelled request whose application ignores the cancel is still
/// in flight, so a request reusing its id is refused `-32600` (in use), never run, and its
/// id is taken again only once the first is answered. Before, the cancel freed the id at
/// once, the second request ran, and two answers went out under id 7.
#[tokio::test(start_paused = true)]
async fn a_cancel_does_not_free_the_id_of_a_request_still_handled() {
    let (_peer, mut incoming, mut raw) = raw_peer(config());
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"a"}"#).await;
    let first = match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(IncomingMessage::Request(r))) => r,
        other => panic!("{other:?}"),
    };
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#)
        .await;
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"b"}"#).await;
    let refused = tokio::time::timeout(GUARD, raw.recv())
        .await
        .expect("no answer to the reused id");
    assert_eq!(
        (&refused["id"], &refused["error"]["code"]),
        (&json!(7), &json!(-32600)),
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("in use"), "{message}");
    match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(IncomingMessage::Notification(n))) => {
            assert_eq!(n.method, "notifications/cancelled")
        }
        other => panic!("{other:?}"),
    }
    // The application ignored the cancel: its answer is the one answer under 7.
    first.respond("a").await.unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":7,"result":"a"})
    );
    answer_all(incoming);
    let got = exchange(&mut raw, r#"{"jsonrpc":"2.0","id":7,"method":"c"}"#).await;
    assert_eq!(got, vec![json!({"jsonrpc":"2.0","id":7,"result":"ok"})]);
}

/// A handler dropped without answering answers `-32601` (`IncomingRequest`'s guard): that
/// answer frees the id, cancelled or not.
#[tokio::test(start_paused = true)]
async fn a_cancelled_request_dropped_unanswered_frees_its_id() {
    let (_peer, mut incoming, mut raw) = raw_peer(config());
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"a"}"#).await;
    let first = match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(IncomingMessage::Request(r))) => r,
        other => panic!("{other:?}"),
    };
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#)
        .await;
    drop(first);
    let dropped = raw.recv().await;
    assert_eq!(
        (&dropped["id"], &dropped["error"]["code"]),
        (&json!(7), &json!(-32601))
    );
    answer_all(incoming);
    let got = exchange(&mut raw, r#"{"jsonrpc":"2.0","id":7,"method":"c"}"#).await;
    assert_eq!(got, vec![json!({"jsonrpc":"2.0","id":7,"result":"ok"})]);
}

/// A request answered later by id (`IncomingRequest::into_id`, then `Peer::respond`) is in
/// flight until that answer is written: a request reusing its id meanwhile is refused
/// `-32600` (in use), never run, and the id is taken again once it is answered. Before,
/// `into_id` freed the id at once, the second request ran, and two answers went out under 7.
#[tokio::test(start_paused = true)]
async fn a_request_answered_later_by_id_holds_its_id_until_answered() {
    let (peer, mut incoming, mut raw) = raw_peer(config());
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"a"}"#).await;
    let first = match tokio::time::timeout(GUARD, incoming.recv()).await {
        Ok(Some(IncomingMessage::Request(r))) => r,
        other => panic!("{other:?}"),
    };
    let id = first.into_id().expect("not in a batch");
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"b"}"#).await;
    let refused = tokio::time::timeout(GUARD, raw.recv())
        .await
        .expect("no answer to the reused id");
    assert_eq!(
        (&refused["id"], &refused["error"]["code"]),
        (&json!(7), &json!(-32600)),
        "{refused}"
    );
    peer.respond(id, json!("a")).await.unwrap();
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","id":7,"result":"a"})
    );
    answer_all(incoming);
    let got = exchange(&mut raw, r#"{"jsonrpc":"2.0","id":7,"method":"c"}"#).await;
    assert_eq!(got, vec![json!({"jsonrpc":"2.0","id":7,"result":"ok"})]);
}

/// RFC 8259 §2: a byte order mark is no JSON whitespace, and §8.1 lets a parser ignore one
/// only at the start of a text: one between two messages on a line is junk, so the line is
/// no run of whole messages separated by whitespace and is refused `-32700` under its first
/// request's id, the message after it not run. Before, the mark was read as a separator and
/// both ran.
#[tokio::test(start_paused = true)]
async fn a_byte_order_mark_between_messages_is_no_separator() {
    let (_peer, incoming, mut raw) = raw_peer(config());
    answer_all(incoming);
    let got = exchange(
        &mut raw,
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"x\"} \u{feff}{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"x\"}",
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (&got[0]["id"], &got[0]["error"]["code"]),
        (&json!(8), &json!(-32700)),
        "{got:?}"
    );
    // A mark before the line's one message is still read past (RFC 8259 §8.1).
    let got = exchange(
        &mut raw,
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"x\"}",
    )
    .await;
    assert_eq!(got, vec![json!({"jsonrpc":"2.0","id":10,"result":"ok"})]);
}

/// JSON-RPC 2.0 §5: a Response answers a request pending at its sender. An object with an
/// id and neither a `method` nor an outcome, under the id of a request of ours already
/// answered, is read as a late malformed answer to it, as a late response is: reported,
/// never answered (a `-32600` under that number could end a request of the other side's
/// own under it). Before, it was answered `-32600`.
#[tokio::test(start_paused = true)]
async fn a_bare_id_under_an_id_of_ours_already_answered_is_not_answered() {
    let (peer, incoming, mut raw) = raw_peer(config());
    let mut diags = peer.diagnostics();
    answer_all(incoming);
    let asking = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("x", None).await }
    });
    let request = tokio::time::timeout(GUARD, raw.recv())
        .await
        .expect("no request");
    raw.send_json(json!({"jsonrpc": "2.0", "id": request["id"], "result": 1}))
        .await;
    assert_eq!(asking.await.unwrap().unwrap(), json!(1));
    let bare = json!({"jsonrpc": "2.0", "id": request["id"]}).to_string();
    assert_eq!(exchange(&mut raw, &bare).await, Vec::<Value>::new());
    match tokio::time::timeout(GUARD, diags.recv()).await {
        Ok(Some(Diagnostic::InvalidMessage {
            id: Some(id),
            answered: false,
            ..
        })) => assert_eq!(id.to_value(), request["id"]),
        other => panic!("{other:?}"),
    }
}

/// A bare id (no `method` nor outcome) naming `id` twice is one thing on every path: which
/// id is in doubt, so it is answered under neither and fails no request of ours, read whole
/// (`jsonrpc::Shape`), refused unbuilt for its parsed cost (`jsonrpc::refusal_of`), or
/// discarded for its size (its envelope read, `transport::envelope`). Before,
/// the unbuilt one was read as a response under its last id and failed our request 1.
#[tokio::test(start_paused = true)]
async fn a_bare_id_named_twice_is_read_alike_built_or_not() {
    let dense = vec![r#"{"a":1}"#; 100].join(",");
    for line in [
        r#"{"jsonrpc":"2.0","id":5,"id":1}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":5,"id":1,"params":[{dense}]}}"#),
        r#"[{"jsonrpc":"2.0","id":5,"id":1}]"#.to_owned(),
        // Over the size limit: read by its envelope, which writes the doubled id so.
        format!(
            r#"{{"jsonrpc":"2.0","id":5,"params":"{}","id":1}}"#,
            "x".repeat(5000)
        ),
    ] {
        let (peer, incoming, mut raw) = raw_peer(PeerConfig {
            max_parsed_cost: 1000,
            max_message_size: 4096,
            ..config()
        });
        answer_all(incoming);
        let asking = tokio::spawn({
            let peer = peer.clone();
            async move { peer.request_raw("x", None).await }
        });
        let request = tokio::time::timeout(GUARD, raw.recv())
            .await
            .expect("no request");
        assert_eq!(request["id"], 1, "{request}");
        assert_eq!(
            exchange(&mut raw, &line).await,
            Vec::<Value>::new(),
            "{line}"
        );
        // Our request 1 still waits: its own answer settles it.
        raw.send_json(json!({"jsonrpc": "2.0", "id": 1, "result": "mine"}))
            .await;
        match tokio::time::timeout(GUARD, asking).await {
            Ok(Ok(Ok(v))) => assert_eq!(v, json!("mine"), "{line}"),
            other => panic!("{line}: {other:?}"),
        }
        let _: Option<PeerError> = None;
    }
}

/// Over TCP (real sockets) the same rules hold: a batch reusing an id is answered once per
/// entry, the second `-32600` (in use); a cancel does not free an id still handled; an
/// oversized line of several answers each request under its id.
#[tokio::test]
async fn over_tcp_every_id_gets_exactly_one_answer() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = mcpl::transport::tcp::Listener::bind("127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, raw) = tokio::join!(listener.accept(), tokio::net::TcpStream::connect(addr));
    let (transport, _) = accepted.unwrap();
    let (_peer, mut incoming) = mcpl::peer::Peer::new(
        transport,
        PeerConfig {
            max_message_size: 4096,
            ..config()
        },
    );
    let (r, mut w) = raw.unwrap().into_split();
    let mut lines = BufReader::new(r).lines();
    let mut next = async move || -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("no line (deadlock guard)")
            .unwrap()
            .expect("EOF");
        serde_json::from_str(&line).unwrap()
    };
    w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"a\"}\n")
        .await
        .unwrap();
    let first = match incoming.recv().await {
        Some(IncomingMessage::Request(r)) => r,
        other => panic!("{other:?}"),
    };
    w.write_all(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7}}\n[{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"b\"},{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"c\"},{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"d\"}]\n",
    )
    .await
    .unwrap();
    // The cancel, then the batch's one request taken (8 "c"); 7 and the second 8 refused.
    let mut taken = Vec::new();
    while taken.is_empty() {
        match incoming.recv().await {
            Some(IncomingMessage::Request(r)) => taken.push(r),
            Some(IncomingMessage::Notification(_)) => {}
            None => panic!("closed"),
        }
    }
    assert_eq!(taken[0].request().method, "c");
    taken.remove(0).respond("c").await.unwrap();
    let batch = next().await;
    let answers = batch.as_array().expect("a batch answer");
    assert_eq!(answers.len(), 3, "{batch}");
    for (id, code) in [(7, -32600), (8, -32600)] {
        assert!(
            answers
                .iter()
                .any(|a| a["id"] == id && a["error"]["code"] == code),
            "{batch}"
        );
    }
    assert!(
        answers.iter().any(|a| a["id"] == 8 && a["result"] == "c"),
        "{batch}"
    );
    first.respond("a").await.unwrap();
    assert_eq!(next().await, json!({"jsonrpc":"2.0","id":7,"result":"a"}));
    let pad = "x".repeat(5000);
    w.write_all(
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"m\",\"params\":\"{pad}\"}} {{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"m\"}}\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let got = [next().await, next().await];
    for id in ["p", "q"] {
        assert!(
            got.iter()
                .any(|a| a["id"] == id && a["error"]["code"] == -32600),
            "{got:?}"
        );
    }
}
