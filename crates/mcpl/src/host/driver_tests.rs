//! The driver's inputs taken in an order the test chooses ([`Driver::take`], the loop's
//! body), over a real transport whose other end the test writes and reads in raw lines: the
//! races between the wire and the application's calls, each ordering made deterministic.
//! Frames are awaited with a deadlock guard, never a sleep.

use super::*;
use crate::peer::PeerConfig;
use crate::transport::Transport;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::io::{ReadHalf, WriteHalf};

/// A driver not running on its own: the test takes each input for it.
struct Rig {
    d: Box<Driver>,
    w: Waiting,
    session: HostSession,
    streams: HostStreams,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
}

/// A deadlock guard, never a synchronisation: what it waits for comes without waiting on
/// anything else (something that never comes fails here, not by hanging).
async fn guard<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("nothing came")
}

impl Rig {
    /// Connected (handshake and initial policy exchange answered), with channel `c1`
    /// registered.
    async fn up() -> Rig {
        Rig::up_with(HostConfig::default()).await
    }

    /// [`Rig::up`] under `config` (its policy replaced by the channels', plus `modelInfo`).
    async fn up_with(mut config: HostConfig) -> Rig {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let (peer, incoming) = Peer::new(Transport::lines(ar, aw, "test"), PeerConfig::default());
        config.policy = [
            "channels.register",
            "channels.lifecycle",
            "channels.incoming",
            "modelInfo",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let Ok((d, session, streams, _connected)) = HostSession::prepare(peer, incoming, config)
        else {
            panic!("a usable configuration");
        };
        let mut r = Rig {
            d,
            w: Waiting::default(),
            session,
            streams,
            lines: BufReader::new(br).lines(),
            write: bw,
        };
        r.d.state.start(clock_now());
        r.d.carry_out(&mut r.w, false);
        let init = r.recv().await;
        assert_eq!(init["method"], "initialize", "{init}");
        let manifest = json!({
            "version": "0.5",
            "channels": { "register": true, "lifecycle": true, "incoming": true },
            "modelInfo": true,
        });
        let caps = json!({ "tools": {}, "experimental": { "mcpl": manifest } });
        let result = json!({ "protocolVersion": "2024-11-05", "capabilities": caps,
                             "serverInfo": { "name": "scripted", "version": "1" } });
        r.send(json!({ "jsonrpc": "2.0", "id": init["id"], "result": result }))
            .await;
        r.read_and_take().await;
        let mut policy = r.recv().await;
        if policy["method"] == "notifications/initialized" {
            policy = r.recv().await;
        }
        assert_eq!(policy["method"], "featureSets/update", "{policy}");
        r.send(json!({ "jsonrpc": "2.0", "id": policy["id"], "result": { "accepted": true } }))
            .await;
        r.read_and_take().await;
        assert!(r.d.state.is_ready());
        let c1 =
            json!({ "channels": [{ "id": "c1", "type": "chat", "direction": "bidirectional" }] });
        r.send(json!({ "jsonrpc": "2.0", "id": 500, "method": "channels/register", "params": c1 }))
            .await;
        r.read_and_take().await;
        let registered = r.recv().await;
        assert_eq!(
            registered["result"]["results"][0]["accepted"], true,
            "{registered}"
        );
        r
    }

    async fn send(&mut self, v: Value) {
        let line = format!("{v}\n");
        guard(self.write.write_all(line.as_bytes()))
            .await
            .expect("the pipe is open");
    }

    /// The host's next frame.
    async fn recv(&mut self) -> Value {
        let line = guard(self.lines.next_line())
            .await
            .expect("the pipe is open");
        serde_json::from_str(&line.expect("the host wrote more")).expect("JSON")
    }

    /// The next thing the server wrote, as the host's reader received it (a response of
    /// ours is settled by then: [`crate::peer::Outbox::cancel`] finds it answered).
    async fn received(&mut self) -> Ordered {
        guard(self.d.incoming.recv_ordered())
            .await
            .expect("the connection is open")
    }

    fn take(&mut self, input: Input) {
        self.d.take(&mut self.w, input, true);
    }

    /// Takes an application call, counted as `HostSession::enqueue` and `GiveUp` count it.
    fn take_call(&mut self, cmd: Cmd) {
        self.d
            .shared
            .queued
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.take(Input::Cmd(cmd));
    }

    /// Fills the driver's command queue (it takes nothing while the test holds it) with
    /// calls naming no caller.
    fn fill_queue(&mut self) {
        let mut filled = 0;
        while self
            .session
            .inner
            .cmds
            .try_send(Cmd::Forget(u64::MAX))
            .is_ok()
        {
            filled += 1;
        }
        assert_eq!(filled, COMMANDS_QUEUED);
    }

    async fn read_and_take(&mut self) {
        let item = self.received().await;
        self.take(Input::Wire(item));
    }

    /// Sends `method` with `params` for a caller numbered `call` and answers it `result`:
    /// the answer as the host received it (not yet taken), and the caller's receiver.
    async fn answered(
        &mut self,
        (method, params, call): (&str, Value, u64),
        result: Value,
    ) -> (Ordered, oneshot::Receiver<Result<Value, HostError>>) {
        let (reply, rx) = oneshot::channel();
        self.take_call(Cmd::Request {
            method: method.to_owned(),
            params,
            call,
            reply,
        });
        let sent = self.recv().await;
        assert_eq!(sent["method"], method, "{sent}");
        self.send(json!({ "jsonrpc": "2.0", "id": sent["id"], "result": result }))
            .await;
        (self.received().await, rx)
    }

    /// The host's verdict on a `channels/incoming` message on `channel`, and every frame
    /// it wrote before it.
    async fn incoming(&mut self, id: u64, channel: &str) -> (Vec<Value>, Value) {
        let m =
            json!({ "messages": [{ "channelId": channel, "messageId": "m", "content": "hi" }] });
        self.send(
            json!({ "jsonrpc": "2.0", "id": id, "method": "channels/incoming", "params": m }),
        )
        .await;
        self.read_and_take().await;
        let mut before = Vec::new();
        loop {
            let frame = self.recv().await;
            if frame["id"] == id && frame.get("method").is_none() {
                return (before, frame["result"]["results"][0].clone());
            }
            before.push(frame);
        }
    }
}

fn chat_1() -> Value {
    json!({ "channel": { "id": "chat:1", "type": "chat", "direction": "bidirectional" } })
}

/// §14.3, §14.5: an answer to a `channels/open` or `channels/close` the host received
/// before its caller gave up is a fact about the server's channels: applied, whichever the
/// driver takes first, the answer or the give-up (`Cmd::Forget`), and nothing is cancelled
/// (the request was answered). Before, the driver dropped such an answer unapplied: the
/// server had opened `chat:1` and closed `c1`, and the host refused `chat:1` and still
/// accepted `c1`.
#[tokio::test]
async fn s14_5_an_answer_received_before_the_caller_gave_up_is_applied() {
    for forget_first in [false, true] {
        let mut r = Rig::up().await;
        let (open, open_rx) = r
            .answered(("channels/open", json!({ "type": "chat" }), 1), chat_1())
            .await;
        let close = json!({ "channelId": "c1" });
        let (closed, close_rx) = r
            .answered(("channels/close", close, 2), json!({ "closed": true }))
            .await;
        // Both callers give up after their answers were received, before they are taken.
        drop((open_rx, close_rx));
        if forget_first {
            r.take_call(Cmd::Forget(1));
            r.take_call(Cmd::Forget(2));
        }
        r.take(Input::Wire(open));
        r.take(Input::Wire(closed));
        if !forget_first {
            r.take_call(Cmd::Forget(1));
            r.take_call(Cmd::Forget(2));
        }
        let order = if forget_first {
            "forget first"
        } else {
            "answer first"
        };
        assert_eq!(r.session.channels(), ["chat:1"], "{order}");
        let (before, verdict) = r.incoming(501, "chat:1").await;
        assert!(before.is_empty(), "{order}: nothing cancelled: {before:?}");
        assert_eq!(verdict["accepted"], true, "{order}: {verdict}");
        let (_, verdict) = r.incoming(502, "c1").await;
        assert_ne!(verdict["accepted"], true, "{order}: {verdict}");
    }
}

/// A call given up while the driver's command queue is full (its `Cmd::Forget` finds no
/// room, so `GiveUp` flags `Shared::sweep` instead of queuing it) is cancelled on the wire
/// at the driver's next input, whatever that input is, and forgotten: the server's answer
/// read after the cancel opens nothing (a late response).
#[tokio::test]
async fn a_call_given_up_while_the_queue_is_full_is_cancelled_at_the_next_input() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut r = Rig::up().await;
    let session = r.session.clone();
    let give_up = GiveUp::new(&session);
    let (reply, caller) = oneshot::channel();
    r.take_call(Cmd::Request {
        method: "channels/open".into(),
        params: json!({ "type": "chat" }),
        call: give_up.call,
        reply,
    });
    let sent = r.recv().await;
    assert_eq!(sent["method"], "channels/open", "{sent}");
    r.fill_queue();
    drop((caller, give_up));
    assert!(
        r.d.shared.sweep.load(SeqCst),
        "the forget found the queue full"
    );
    // The next input is a message of the server's: the cancel goes out before its answer.
    let (before, verdict) = r.incoming(501, "c1").await;
    assert_eq!(verdict["accepted"], true, "{verdict}");
    let [cancel] = before.as_slice() else {
        panic!("one cancel before the answer: {before:?}");
    };
    assert_eq!(cancel["method"], "notifications/cancelled", "{cancel}");
    assert_eq!(cancel["params"]["requestId"], sent["id"], "{cancel}");
    assert_eq!(
        cancel["params"]["reason"], "the caller stopped waiting",
        "{cancel}"
    );
    assert!(!r.d.shared.sweep.load(SeqCst), "swept once");
    r.send(json!({ "jsonrpc": "2.0", "id": sent["id"], "result": chat_1() }))
        .await;
    let (_, verdict) = r.incoming(502, "chat:1").await;
    assert_ne!(
        verdict["accepted"], true,
        "a late answer opened chat:1: {verdict}"
    );
    assert_eq!(r.session.channels(), ["c1"]);
}

/// The sweep and an answer already received (§14.5): a caller gives up while the queue is
/// full after the answer to its `channels/open` arrived; the sweep runs at the driver's
/// next input, which is that answer. It finds the answer received and cancels nothing; the
/// answer is applied.
#[tokio::test]
async fn s14_5_the_sweep_applies_an_answer_already_received() {
    let mut r = Rig::up().await;
    let session = r.session.clone();
    let give_up = GiveUp::new(&session);
    let call = give_up.call;
    let (answer, caller) = r
        .answered(("channels/open", json!({ "type": "chat" }), call), chat_1())
        .await;
    r.fill_queue();
    drop((caller, give_up));
    r.take(Input::Wire(answer));
    assert_eq!(r.session.channels(), ["c1", "chat:1"]);
    let (before, verdict) = r.incoming(501, "chat:1").await;
    assert!(before.is_empty(), "nothing cancelled: {before:?}");
    assert_eq!(verdict["accepted"], true, "{verdict}");
}

/// A call given up with its answer already queued (kept for that answer: `give_up`), whose
/// request then expires in the state machine before the answer is read, is forgotten
/// whole: the answer is late, and no mark of it stays behind (`Waiting::answered_given_up`
/// kept one per such race, for the connection's life).
#[tokio::test]
async fn a_given_up_answered_request_that_expires_leaves_no_mark() {
    let mut r = Rig::up().await;
    let (open, open_rx) = r
        .answered(("channels/open", json!({ "type": "chat" }), 1), chat_1())
        .await;
    drop(open_rx);
    r.take_call(Cmd::Forget(1));
    assert_eq!(r.w.answered_given_up.len(), 1, "kept for its queued answer");
    r.d.state
        .handle_timeout(clock_now() + Duration::from_secs(24 * 3600));
    r.d.carry_out(&mut r.w, false);
    r.take(Input::Wire(open));
    assert!(
        r.w.answered_given_up.is_empty(),
        "{:?}",
        r.w.answered_given_up
    );
    assert!(r.session.channels().iter().all(|c| c != "chat:1"));
}

/// §5.4: a notification the peer's queue had no room for is gated by the driver where it
/// queues it (`Cmd::Notify`): one the grant does not allow is refused, nothing written (the
/// next frame is the request after it).
#[tokio::test]
async fn s5_4_a_notification_the_driver_queues_is_gated_there() {
    let mut r = Rig::up().await;
    let publish = json!({ "channelId": "c1", "content": "hi" });
    let (reply, refused) = oneshot::channel();
    r.take_call(Cmd::Notify("channels/publish".into(), publish, reply));
    assert_eq!(
        refused.await.expect("answered"),
        Err(HostError::NotGranted(Capability::ChannelsPublish))
    );
    let (reply, mut answer) = oneshot::channel();
    r.take_call(Cmd::Request {
        method: "ping".into(),
        params: json!({}),
        call: 9,
        reply,
    });
    assert!(answer.try_recv().is_err(), "{:?}", answer.try_recv());
    let next = r.recv().await;
    assert_eq!(next["method"], "ping", "{next}");
}

/// §14.5: a `channels/close` given up while the driver's queue is full is given up by the
/// sweep at the driver's next input, which takes its channel out (fail closed,
/// `ChannelTable::unconfirmed`); the channels the getters read are renewed with it. Before,
/// the sweep ran before the driver noted the channels to compare, so
/// `HostSession::channels` kept showing the channel gone from the state.
#[tokio::test]
async fn s14_5_a_close_swept_after_its_caller_gave_up_is_seen_by_the_getters() {
    let mut r = Rig::up().await;
    let session = r.session.clone();
    let give_up = GiveUp::new(&session);
    let (reply, caller) = oneshot::channel();
    r.take_call(Cmd::Request {
        method: "channels/close".into(),
        params: json!({ "channelId": "c1" }),
        call: give_up.call,
        reply,
    });
    let sent = r.recv().await;
    assert_eq!(sent["method"], "channels/close", "{sent}");
    r.fill_queue();
    drop((caller, give_up));
    // The next input is a message of the server's: the sweep gives the close up first.
    let (before, verdict) = r.incoming(501, "c1").await;
    assert_eq!(before.len(), 1, "the cancel: {before:?}");
    assert_eq!(verdict["code"], -32023, "{verdict}");
    assert!(
        r.session.channels().is_empty(),
        "{:?}",
        r.session.channels()
    );
}

/// JSON-RPC 2.0 §4, `HostConfig::answer_timeout`: a handler's answer already queued when
/// the deadline fires (the driver takes the deadline first) comes too late, since the server
/// was answered `-32603` (`answer_timeout`). It is dropped, and reported as
/// [`HostDiagnostic::LateAnswer`] with the request's method and id, so the application
/// sees that its answer never reached the server. Before, it was dropped with a debug log
/// only. Time is tokio's paused clock.
#[tokio::test(start_paused = true)]
async fn an_answer_queued_when_its_deadline_fires_is_reported_late() {
    let config = HostConfig {
        answer_timeout: Some(Duration::from_secs(40)),
        request_handler: Some(Arc::new(|_m: &str, _p: Value| {
            Box::pin(async { Ok(json!({ "model": "late" })) })
        })),
        ..HostConfig::default()
    };
    let mut r = Rig::up_with(config).await;
    r.send(json!({ "jsonrpc": "2.0", "id": 9, "method": "model/info", "params": {} }))
        .await;
    r.read_and_take().await;
    // The handler's answer, queued: the driver has not taken it.
    let answer = guard(r.d.cmds.recv()).await.expect("the handler answers");
    assert!(matches!(answer, Cmd::Answer { .. }));
    tokio::time::advance(Duration::from_secs(41)).await;
    r.take(Input::Tick);
    let timed_out = r.recv().await;
    assert_eq!(timed_out["id"], 9, "{timed_out}");
    assert_eq!(
        timed_out["error"]["data"]["reason"], "answer_timeout",
        "{timed_out}"
    );
    r.take(Input::Cmd(answer));
    let mut diags = Vec::new();
    while let Ok(d) = r.streams.diagnostics.try_recv() {
        diags.push(d);
    }
    assert!(
        diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::AnswerTimedOut { .. })),
        "{diags:?}"
    );
    assert!(
        diags
            .iter()
            .any(|d| matches!(d, HostDiagnostic::LateAnswer { method, id }
            if method == "model/info" && id == "9")),
        "the late answer was dropped unseen: {diags:?}"
    );
}

/// JSON-RPC 2.0 lets the server reuse an id once it is answered: the deadline answered
/// request 9, the server asked again under 9 and cancelled that. The first handler's
/// answer, queued before the deadline fired and taken after all that, is still late and
/// reported ([`HostDiagnostic::LateAnswer`]): the driver judges it by its hand-out
/// (`HostState::late_answer_of`). Before, the reuse cleared the state machine's memory of
/// the first request, and the answer was dropped unseen.
#[tokio::test(start_paused = true)]
async fn a_late_answer_is_reported_after_the_server_reused_its_id() {
    let config = HostConfig {
        answer_timeout: Some(Duration::from_secs(40)),
        request_handler: Some(Arc::new(|_m: &str, _p: Value| {
            Box::pin(async { Ok(json!({ "model": "late" })) })
        })),
        ..HostConfig::default()
    };
    let mut r = Rig::up_with(config).await;
    let ask = json!({ "jsonrpc": "2.0", "id": 9, "method": "model/info", "params": {} });
    r.send(ask.clone()).await;
    r.read_and_take().await;
    let first = guard(r.d.cmds.recv()).await.expect("the handler answers");
    tokio::time::advance(Duration::from_secs(41)).await;
    r.take(Input::Tick);
    let timed_out = r.recv().await;
    assert_eq!(
        timed_out["error"]["data"]["reason"], "answer_timeout",
        "{timed_out}"
    );
    r.send(ask).await;
    r.read_and_take().await;
    r.send(
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": { "requestId": 9 } }),
    )
    .await;
    r.read_and_take().await;
    let cancelled = r.recv().await;
    assert_eq!(cancelled["error"]["code"], -32800, "{cancelled}");
    r.take(Input::Cmd(first));
    let mut diags = Vec::new();
    while let Ok(d) = r.streams.diagnostics.try_recv() {
        diags.push(d);
    }
    let late = diags
        .iter()
        .filter(|d| matches!(d, HostDiagnostic::LateAnswer { id, .. } if id == "9"))
        .count();
    assert_eq!(late, 1, "the first request's late answer: {diags:?}");
}

/// JSON-RPC 2.0 §4: a server's request taken when every command sender is gone (the
/// application dropped its last `HostSession`, and no handler runs) cannot reach a handler,
/// whose answer would come back through the command queue. It is answered `-32603` at
/// once, before the driver ends the connection (it does at its next look at the queue,
/// which is closed), so the server learns why rather than only seeing the connection end.
/// Before, it was dropped: unanswered until the connection ended, and for good on a
/// connection whose queue the driver could not look at (its writer backed up).
#[tokio::test]
async fn a_request_taken_when_every_sender_is_gone_is_answered() {
    let config = HostConfig {
        request_handler: Some(Arc::new(|_m: &str, _p: Value| {
            Box::pin(async { Ok(json!({ "model": "m" })) })
        })),
        ..HostConfig::default()
    };
    let mut r = Rig::up_with(config).await;
    // Every sender gone: the driver's weak one upgrades to nothing.
    let (tx, _rx) = crate::peer::queue::channel::<Cmd>(1);
    r.d.cmd_tx = tx.downgrade();
    drop(tx);
    r.send(json!({ "jsonrpc": "2.0", "id": 9, "method": "model/info", "params": {} }))
        .await;
    r.read_and_take().await;
    let answer = r.recv().await;
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
}

/// A call that finds the command queue full waits for room (`HostSession::wait_for_room`)
/// counted as queued all along, so a plain request sent meanwhile goes behind it
/// (`HostSession::behind_driver`); given up while waiting, it is uncounted and never
/// queued; waiting when room is made, it is queued behind the calls before it and carried
/// out (§5.4, §10.5: gated as it is taken).
#[tokio::test]
async fn s10_5_a_call_that_waits_for_room_is_counted_until_queued_or_given_up() {
    use std::future::Future;
    use std::sync::atomic::Ordering::SeqCst;
    use std::task::{Context, Poll};
    let mut r = Rig::up().await;
    r.fill_queue();
    let queued = |r: &Rig| r.d.shared.queued.load(SeqCst);
    // The filler was sent straight into the queue, uncounted.
    assert_eq!(queued(&r), 0);
    let session = r.session.clone();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    {
        // A call with no guard of its own (a turn's would queue its `aborted` when dropped).
        let waiting = session.set_consumer_patterns(["a.*"]);
        tokio::pin!(waiting);
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        assert_eq!(queued(&r), 1, "counted while it waits for room");
        assert!(session.behind_driver());
    }
    assert_eq!(queued(&r), 0, "given up while waiting: uncounted");
    let waiting = session.start_turn("t1", "c", 0);
    tokio::pin!(waiting);
    assert!(waiting.as_mut().poll(&mut cx).is_pending());
    assert_eq!(queued(&r), 1);
    // The driver takes the queue's calls, making room: the waiting call is queued last.
    let mut taken = 0;
    while let Poll::Ready(Some(cmd)) = r.d.cmds.poll_recv(&mut cx) {
        taken += 1;
        if taken == 1 {
            assert!(waiting.as_mut().poll(&mut cx).is_pending(), "its reply");
        }
        if matches!(cmd, Cmd::StartTurn { .. }) {
            // Counted once, by the call itself (`take` uncounts it).
            r.take(Input::Cmd(cmd));
            break;
        }
        // A filler: counted as `take` expects, then taken.
        r.take_call(cmd);
    }
    assert_eq!(taken, COMMANDS_QUEUED + 1, "queued behind the fillers");
    assert_eq!(queued(&r), 0);
    // Carried out: the rig's grant has no `inferenceLifecycle`, so the gate refuses it.
    let refused = guard(waiting).await;
    assert!(
        matches!(refused, Err(HostError::NotGranted(_))),
        "{refused:?}"
    );
}

/// JSON-RPC 2.0 §4: a handler reads the wire id of the server's request it answers
/// (`handled_request_id`), in its call and in the future it returned, whatever the id's
/// form; outside a handler there is none. The handler's arguments stay the method and
/// params ([`RequestHandler`]'s signature kept): an application that parks a request for a
/// person to answer (the inspector's `pending`) shows the id the server sent.
#[tokio::test(start_paused = true)]
async fn a_handler_reads_the_wire_id_it_answers() {
    assert_eq!(super::handled_request_id(), None);
    let config = HostConfig {
        request_handler: Some(Arc::new(|_m: &str, _p: Value| {
            let called = super::handled_request_id();
            Box::pin(async move {
                let polled = super::handled_request_id();
                Ok(json!({ "called": called, "polled": polled }))
            })
        })),
        ..HostConfig::default()
    };
    let mut r = Rig::up_with(config).await;
    for id in [json!(9), json!("abc")] {
        r.send(json!({ "jsonrpc": "2.0", "id": id, "method": "model/info", "params": {} }))
            .await;
        r.read_and_take().await;
        let answer = guard(r.d.cmds.recv()).await.expect("the handler answers");
        let Cmd::Answer { outcome, .. } = answer else {
            panic!("not an answer");
        };
        let got = outcome.expect("answered");
        assert_eq!(got, json!({ "called": id, "polled": id }));
    }
}
