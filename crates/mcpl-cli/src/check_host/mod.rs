//! `mcpl check-host`: the conformance checker for hosts. It is an MCPL server that a host
//! connects to (spawned over stdio, or over TCP / WebSocket), advertises a small manifest,
//! probes how the host treats what it sends, and reports check by check (ids and sections in
//! [`HOST_CATALOGUE`]). The report goes to stderr or `--report FILE`: in stdio mode stdout
//! belongs to the protocol.
//!
//! The run, in order ([`session::Run`]): the host's `initialize` ([`exchange`]), its initial
//! policy (awaited one step; without one, or after a malformed one the server refused, the
//! probes go on as for a host that granted nothing, §5.3, §5.4), the probes ([`probes`],
//! the manifest changes of §17 among them, [`manifest_change`]), then `--watch` of listening.
//!
//! Bounds (issue #20), whatever the host sends:
//! - **wall time**: the run ends within [`Bounds::wall`] = 24 × `--timeout` +
//!   `--inference-timeout` + `--watch` (151 s with the defaults), then writes its report;
//! - **memory**: one message from the host is at most [`MAX_MESSAGE`] bytes (a larger one
//!   is discarded unread) and [`MAX_PARSED_COST`] once parsed (a costlier one is refused
//!   unbuilt), at most [`INCOMING_QUEUE`] of them wait to be handled, and the checker holds
//!   nothing per message once handled ([`peer_config`]);
//! - **report**: one line per catalogue check, each detail capped at
//!   [`judge::DETAIL_LIMIT`] bytes, whatever it quotes.
//!
//! Exit codes as for `mcpl check`: 0 nothing failed, 1 a check failed, 2 the host never
//! connected, went away before the probes were done, the run reached its bound, or the
//! arguments were unusable.

mod accept;
mod channels;
mod delivered;
mod exchange;
mod frames;
mod gated;
mod judge;
mod junk;
mod lifecycle;
mod manifest_change;
mod probes;
mod refusal_data;
mod reply;
mod seen;
mod served;
mod session;
mod streamed;
mod tally;
mod tolerance;
mod unlisted;
mod watched;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mcpl::peer::{Peer, PeerConfig};
use mcpl::transport::{stdio, Transport};

use crate::check::report::{catalogue, catalogue_text_of, CheckDef, Recorder, Report};
use crate::check::spread::{SpreadReader, Spreads};
use crate::check::{seconds, secs_arg, wait_arg};
use crate::term::emit_err;

catalogue! {
    HOST_CATALOGUE, "Every check `mcpl check-host` performs, in report order.";
    "host.initialize-advertises-mcpl", "§5.2", "initialize carries experimental.mcpl with version \"0.5\"";
    "host.policy-is-request", "§5.3", "the initial featureSets/update is a Request, sent even when it grants nothing";
    "host.grant-within-advertisement", "§5.4", "effectiveCapabilities, in every policy Request, names only paths the server advertised (an entry naming no §6.2 path fails; a bare parent or a `*` short of the leaves, which grants nothing, warns; a `*` reaching past the advertisement warns, and fails once the host acts on what it reaches, e.g. answers model/info)";
    "host.grant-not-contradictory", "§5.4", "no policy Request names a path both in effectiveCapabilities and deniedCapabilities";
    "host.refuses-before-ready", "§5.3", "a push/event sent before the receipt is refused with an error";
    "host.register-refused-before-ready", "§5.3", "a channels/register sent before the receipt is refused with an error";
    "host.inference-refused-before-ready", "§5.3", "an inference/request sent before the receipt is refused with an error (never run: the grant is not yet in force)";
    "host.rejects-with-error", "§6.6", "a push/event under an undeclared feature set gets an error object (-32003)";
    "host.push-follows-grant", "§5.4", "push/event is accepted when its set is allowed, refused with an error when not";
    "host.answers-every-request", "§6.6", "model/info and channels/list get an answer, never silence";
    "host.ping-answered", "§6.6", "a ping gets an answer (MCP: an empty result; an error, or a result that is no object, warns), never silence";
    "host.unknown-method-errors", "§6.6", "an unknown method gets an error (-32601), not silence";
    "host.incoming-unregistered-refused", "§14.5", "channels/incoming for a channel never registered is refused";
    "host.register-itemized", "§14.5", "channels/register is refused unless granted, and answered with one result per descriptor when it is (refusing it whole then warns: safe, but no itemized answer)";
    "host.incoming-follows-grant", "§14.5", "channels/incoming is refused when channels.incoming is not granted";
    "host.hooks-after-ready", "§5.3", "context/beforeInference only after the receipt, under a granted hook leaf";
    "host.hook-params-shape", "§10.1", "every context/beforeInference carries §10.1's params: string inferenceId and conversationId, a non-negative integer turnIndex, userMessage written (a string or null), model a ModelInfo object when given";
    "host.user-message-redacted", "§10.1", "userMessage is null in beforeInference unless observe is granted (text under a member §10.1 does not list, nor §14.4's channel ids, observe not granted, warns)";
    "host.grant-within-own-advertisement", "§5.2", "the grant names only paths the host itself advertises supporting (a warning)";
    "host.undeclared-use-refused", "§6.4", "a use the exercising feature set does not declare is refused with an error";
    "host.inference-follows-grant", "§5.4", "inference/request is refused with an error unless its set is allowed, and answered when it is";
    "host.chunks-only-when-streamed", "§11.4", "no inference/chunk for a request of the checker's that asked for no stream, while it waits for its answer (one after its answer fails host.chunks-well-formed; its inference/request sets stream: true only when the grant in force allows inferenceRequest.streaming; §11.2: it defaults to false); a warning: §11.4 describes chunks for stream: true, and no MUST forbids them otherwise";
    "host.chunks-well-formed", "§11.4", "when the grant in force allows inferenceRequest.streaming and check.stream is available (a host whose enabled allowlist leaves it out gets the unstreamed probe), the inference/request probe asks stream: true, and each inference/chunk for it names its id in requestId, carries a non-negative integer index, each greater than the one before (a repeat or an index going back fails), and a string delta, and comes before the response, none after; a chunk naming no request of the checker's fails, and so does one naming a request of the checker's the host had already answered (a result, or an error refusing it: §11.4, chunks come before the final response); an index gap or a first index other than 0, an integer written with a fraction (index 0.0, requestId 29.0: read as the integer), no chunk before a result with text, or deltas joined that are not its content, warns";
    "host.inference-result-shape", "§11.3", "an inference/request result carries the generated content as a string, finishReason from App. B.4";
    "host.requests-independent", "§6.6", "a ping sent while an earlier request is outstanding is answered within --timeout (no head-of-line blocking)";
    "host.survives-junk-line", "§4", "after one line that is not JSON, the host still answers a ping";
    "host.member-names-unique", "§4", "no object in a message from the host repeats a member name (RFC 8259 §4, I-JSON; a warning)";
    "host.hook-is-request", "§4.1", "context/beforeInference is sent as a Request, never as a Notification";
    "host.no-byte-order-mark", "§4", "no message from the host begins with a UTF-8 byte order mark (RFC 8259 §8.1; a warning)";
    "host.notifications-have-no-id", "§4.1", "a notification-only method (notifications/initialized, inference/lifecycle, inference/chunk, channels/outgoing/*, MCP's notifications/*) is sent without an id";
    "host.messages-one-line", "§4", "over line framing (stdio, --tcp), every message from the host is one line, none spread over several (as a pretty-printer writes)";
    "host.response-ids-as-sent", "§4", "a response to the checker's request writes its integer id as the request did, not with a fraction or exponent such as 2.0 (JSON-RPC 2.0 §5; a warning)";
    "host.deliveries-within-grant", "§5.4", "every MCPL message the host delivers (inference/lifecycle, channels/publish, channels/open, channels/close, channels/outgoing/*, channels/list …) needs only what the grant in force allows, and none is one 0.5.0 removed (context/afterInference, §10.5)";
    "host.unknown-channel-code", "§14.6", "channels/incoming refused for a channel never registered carries -32023 (-32002 when channels.incoming is not granted; a warning)";
    "host.answers-follow-grant", "§12", "model/info and channels/list get a result only when the grant allows modelInfo / channels.register, else an error (§12, §14.1, §5.4); an answer under a path the host's own grant reaches though the server never advertised it is host.grant-within-advertisement's defect, counted there once";
    "host.removed-methods-refused", "§7", "scope/elevate, removed in 0.5.0, gets an error, never a result (an approval on a server-supplied label)";
    "host.invalid-uses-refused", "§6.4", "a push/event under a feature set whose uses holds a value outside §6.2's vocabulary is refused with an error (the set is disabled, invalid_uses), even with pushEvents granted";
    "host.refusal-code", "§6.6", "a push/event or inference/request the policy does not allow is refused with -32001 or -32002, the documented codes (-32003, unknown feature set, also under check.typo, whose invalid declaration a host may discard; -32601 only from a host not advertising the method's capability)";
    "host.refusal-data", "§6.6", "every -32002 answering a request of the checker's (a probe refused for the grant, for readiness, for a set's undeclared use) names the denied capability in data.capability, one the method needs (§14.6; a warning)";
    "host.lifecycle-metadata-only", "§10.5", "every inference/lifecycle the host sends is metadata only: well-formed, no message content, model only when modelInfo is granted, usage on completed only (text under a member §10.5 does not list warns)";
    "host.lifecycle-paired", "§10.5", "inference/lifecycle signals pair up: no terminal without its started, no second terminal, no second started for one inferenceId";
    "host.responses-once", "§4", "each request of the checker's gets one response: none comes again under the id of a request already answered (JSON-RPC 2.0 §5)";
    "host.responses-answer-requests", "§4", "every response the host sends answers a request of the checker's: none under an id the checker never sent, no result under id null (JSON-RPC 2.0 §5; a second answer is host.responses-once's)";
    "host.register-duplicate-id", "§14.2", "a channels/register naming one channel id in two descriptors is refused with an error, or answered with one result per descriptor accepting at most one of them";
    "host.frames-valid", "§4", "every frame the host writes is a JSON-RPC 2.0 message (a line that is not JSON, a frame that does not parse, an invalid message fail)";
    "host.request-ids-unique", "§4", "no request the host sends reuses an id it sent before on the connection (MCP: never within a session; a warning)";
    "host.in-flight-ids-unique", "§4", "no request the host sends comes under the id of one of its requests the checker has not answered yet (MCP: never while in flight; refused -32600)";
    "host.initialized-sent", "§4", "after initialize, the host sends notifications/initialized (MCP's lifecycle: the client MUST)";
    "host.unknown-fields-tolerated", "§8", "the host goes on after the checker's initialize (and tools/list) answer carries members no spec defines: it does not end the connection, answer an error under id null, or fall silent (§8: hosts MUST tolerate unknown response fields)";
    "host.advertisement-shape", "§5.2", "experimental.mcpl mirrors the server's capability shape (§5.1): a member outside the vocabulary or one that advertises nothing warns (`channels: true` is §5.1's shorthand for every leaf)";
    "host.changed-itemized", "§14.5", "a channels/changed Request adding channels is refused unless channels.register is granted (§14.1: an error, or one result per descriptor accepting none), and answered with one result per descriptor in added when it is (refusing it whole then warns: safe, but no itemized answer)";
    "host.channels-list-complete", "§14.3", "once the host accepted a channel of the checker's in channels/register, its answer to channels/list names it (a list leaving it out, as a stub answering [] does, warns, as does one naming a channel the checker never registered or one id twice; a result without a channels array fails)";
    "host.manifest-fetched-before-acting", "§17.3", "no policy change (a featureSets/update Request or Notification changing the grant or a set's status) comes between the checker's mcpl/manifestChanged and the host's mcpl/manifest (a host MAY ignore the announcement: skipped when it never fetches; judged on policy messages, all a server sees)";
    "host.manifest-unparseable-keeps-previous", "§17.5", "after one mcpl/manifest answer that is no manifest object, the previous manifest stands: no narrowing policy message (no capability withdrawn, no available feature set disabled), the connection kept, channels/list (granted before) answered as just before the change (refused before and after is no change, §14.3)";
    "host.manifest-removals-revoked", "§17.5", "once the host has read a fetched manifest removing channels.incoming and a feature set, a channels/incoming for its registered channel and a push under the removed set are refused with an error (§6.7: revoked host-first, then told; a probe answered before the host's first policy message after the fetch is sent again after it, or a step after the fetch; channels/incoming is also probed while the host's Request telling the narrowing awaits its receipt, and must already be refused: a reduction takes effect before its Request is sent)";
    "host.manifest-partial-removals-applied", "§17.5", "a fetched manifest that parses but declares sets invalidly still has its removals applied: a push under the feature set it removed is refused with an error";
    "host.manifest-additions-not-granted", "§17.5", "a capability a fetched manifest adds (modelInfo, never advertised before) or advertises again after the host revoked it (channels.incoming) is not used until a policy Request granting it is answered: model/info and channels/incoming for the registered channel are refused meanwhile, an answer sent before the host could have read the receipt included, and they are probed while the receipt of a Request granting them is held, when they must still be refused (§6.7: tell → receipt → activate)";
    "host.manifest-one-update-per-change", "§17.5", "at most one policy message follows one manifest change, not one per item (a Request only widening the grant is a decision of its own, not counted; the receipt itself is host-internal, §17.6: only its wire consequence is judged; a warning)";
    "host.manifest-narrowing-requested", "§17.5", "a fetched manifest whose removals take a capability out of the grant (channels.incoming, granted before) is followed by a featureSets/update Request leaving it out, as sent, within a step of the fetch (§6.7: a Request for any change to the effective grant, reductions included; §17.5 step 3: revoked host-first, then the Request; none, or only a Notification, fails; skipped when only a feature set went, which changes no grant)";
    "host.manifest-withdrawn-refused", "§17.5", "once the host's featureSets/update Request telling a fetched narrowing that withdrew channels.incoming is answered, a channels/incoming for the checker's registered channel is refused with -32002 (§5.4: a denied capability behaves as if never advertised; §6.7: the narrowed grant in force; a result fails, one refusing every message inside it too, as a refusal in the wrong form (§6.6); another error code warns, -32017 named as §14.6's; skipped when no Request told the narrowing, no channel was registered with channels.incoming granted, or the channels/incoming probe after the fetch got no answer)";
}

/// Arguments of `mcpl check-host`.
#[derive(Debug, clap::Args)]
pub struct CheckHostArgs {
    /// List every check (id, section, what conforms) and exit.
    #[arg(long)]
    pub list: bool,
    /// Write the report as JSON: `{ target, checks: [{id, section, status, detail}], summary }`.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Wait for one host connection over TCP on ADDR instead of stdio (port 0 picks one;
    /// the bound address is printed on stderr).
    #[arg(long, value_name = "ADDR", conflicts_with = "ws")]
    pub tcp: Option<String>,
    /// Wait for one host connection over plaintext WebSocket on ADDR instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub ws: Option<String>,
    /// Bound on every phase, in seconds: the connection, the host's initialize, its policy,
    /// each probe's answer. The whole run ends within 24 × this + --inference-timeout +
    /// --watch.
    #[arg(long, value_name = "SECS", default_value_t = 5.0, value_parser = wait_arg)]
    pub timeout: f64,
    /// After the probes, keep the connection open this many seconds for what the host sends
    /// on its own (hooks when a user turn runs), then end it.
    #[arg(long, value_name = "SECS", default_value_t = 1.0, value_parser = secs_arg)]
    pub watch: f64,
    /// Bound on the answer to the `inference/request` probe when the host grants it, in
    /// seconds: such a host runs a real (one short message) inference.
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = wait_arg)]
    pub inference_timeout: f64,
}

/// Largest message accepted from the host (1 MiB): the checker's exchanges need a few
/// hundred bytes, a hook with a long conversation a few KiB. A larger one is discarded
/// without being buffered (the library's framing).
pub const MAX_MESSAGE: usize = 1024 * 1024;

/// Most a message from the host may cost once parsed, in [`mcpl::jsonrpc::parsed_cost`]
/// units (about 32 bytes each at worst: 8 MiB), far above what the checker's exchanges need.
/// The library's default (4,194,304 units) let a 1 MiB message of small objects build about
/// 90 MiB. Past it a request is answered `-32600` unbuilt, a response fails its request, a
/// notification is discarded (each reported as a frame that is not valid JSON-RPC).
pub const MAX_PARSED_COST: usize = MAX_MESSAGE / 4;

/// Messages from the host waiting to be handled; past it the transport is not read.
pub const INCOMING_QUEUE: usize = 4;

/// Diagnostics of the connection held until the run reads them; past it the oldest are
/// dropped and counted, and the checks judged from them say so ([`session::Run::view_lost`]).
pub const DIAGNOSTICS_KEPT: usize = 16;

/// The connection's limits: messages and queues as above, every request and every write
/// bounded by the step timeout (a host that stops reading cannot stall the run: the write
/// that times out closes the connection).
fn peer_config(step: Duration) -> PeerConfig {
    PeerConfig {
        request_timeout: Some(step),
        write_timeout: Some(step),
        max_message_size: MAX_MESSAGE,
        max_parsed_cost: MAX_PARSED_COST,
        incoming_capacity: INCOMING_QUEUE,
        outgoing_capacity: 16,
        diagnostics_capacity: DIAGNOSTICS_KEPT,
        // Bounds the later policy Requests kept unanswered (`session::Run::deferred`).
        max_in_flight_requests: session::MAX_DEFERRED_RECEIPTS,
        ..PeerConfig::default()
    }
}

/// How long the run waits: each phase (`--timeout`), the listening after the probes
/// (`--watch`), the inference probe when granted (`--inference-timeout`).
#[derive(Clone, Copy)]
struct Bounds {
    step: Duration,
    watch: Duration,
    infer: Duration,
}

impl Bounds {
    /// [`Bounds::wall`] as the report names it.
    const FORMULA: &'static str = "24 × --timeout + --inference-timeout + --watch";

    /// The run's bound once the host is connected. Every phase ends at a deadline, never at
    /// a quiet moment:
    ///
    /// | phase | bound |
    /// |---|---|
    /// | `initialize` | 1 step from the connection |
    /// | the policy | 1 step from the answer to `initialize` |
    /// | the push sent before the receipt | 1 step from its send (within the policy's step) |
    /// | the ping before the receipt | within the policy's step, at most half a step (and 1 s) after the early requests |
    /// | fourteen probes | 1 step each; a paired ping starts with its request, with its own step; the `channels/list` after a registration beside the probe repeating a channel id |
    /// | the inference probe | `--inference-timeout` when granted, else 1 step |
    /// | the `channels/list` before the manifest changes | [`manifest_change::LIST_STEPS`] (1) step |
    /// | the manifest-change probes | [`manifest_change::PHASE_STEPS`] (3) steps in all |
    /// | later policy receipts, and `mcpl/manifest` answers changing the advertisement, each held behind a ping round trip (§6.7, §17.5) | up to half a step (at most 1 s) each, 16 times that in all (`Run::hold_left`): 8 steps, or 16 s once a step is over 2 s, taken within the phases above |
    /// | listening | `--watch` |
    ///
    /// That is 21 steps, the inference (at least 1 step) and the watch, and the holds on top.
    /// The holds, and a host that keeps sending requests while the checker waits (the time
    /// their answers take to write, each under the write timeout, which closes the
    /// connection when it fires), can take more than the one step left, so the session is
    /// cut at 22 steps, the inference and the watch whatever the host does, the report then
    /// saying where it stood (the phases not reached are said so).
    fn session(&self) -> Duration {
        self.step.saturating_mul(22) + self.infer + self.watch
    }

    /// The whole run's bound: accepting the connection (1 step, `--tcp`/`--ws`),
    /// [`Bounds::session`], and writing what is still owed to the host once the session
    /// ends (1 step), i.e. 24 × `--timeout` + `--inference-timeout` + `--watch`.
    #[cfg_attr(not(test), allow(dead_code))]
    fn wall(&self) -> Duration {
        self.step.saturating_mul(2) + self.session()
    }
}

/// Runs `mcpl check-host` and returns its exit code.
pub fn main(args: CheckHostArgs) -> ExitCode {
    if args.list {
        crate::term::emit(&catalogue_text_of(HOST_CATALOGUE));
        return ExitCode::SUCCESS;
    }
    let label = match (&args.tcp, &args.ws) {
        (Some(a), _) => format!("tcp://{a}"),
        (_, Some(a)) => format!("ws://{a}"),
        _ => "stdio".to_owned(),
    };
    let report = match (
        seconds("timeout", args.timeout),
        seconds("watch", args.watch),
        seconds("inference-timeout", args.inference_timeout),
    ) {
        (Ok(step), Ok(watch), Ok(infer)) if !step.is_zero() && !infer.is_zero() => {
            run(&args, Bounds { step, watch, infer }, label)
        }
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => unreachable_report(label, e),
        _ => unreachable_report(
            label,
            "--timeout and --inference-timeout must be greater than 0".into(),
        ),
    };
    // A host that never connected (a listener that could not start, unusable arguments):
    // one error line, as `mcpl check` says it, not a list of checks that never ran (the
    // JSON document and a `--report` file still carry the whole report).
    let (_, fail, warn, skip) = report.counts();
    let never_connected =
        report.error.is_some() && fail == 0 && warn == 0 && skip == report.checks.len();
    let text = if args.json {
        // `json_text`: what a terminal acts on, escaped as JSON, so the document parses.
        crate::term::json_text(report.to_json().to_string())
    } else if never_connected && args.report.is_none() {
        String::new()
    } else {
        report.to_text()
    };
    match &args.report {
        Some(path) => {
            if let Err(e) = std::fs::write(path, text) {
                emit_err(&format!(
                    "mcpl check-host: cannot write {}: {e}\n",
                    path.display()
                ));
                return ExitCode::from(2);
            }
        }
        None => emit_err(&text),
    }
    if let Some(e) = &report.error {
        emit_err(&format!("mcpl check-host: {e}\n"));
    }
    ExitCode::from(report.exit_code())
}

fn unreachable_report(target: String, error: String) -> Report {
    let mut rec = Recorder::with(HOST_CATALOGUE, "mcpl check-host", false);
    rec.skip_rest("the host never connected");
    let mut r = rec.finish(target);
    r.error = Some(error);
    r
}

fn run(args: &CheckHostArgs, bounds: Bounds, label: String) -> Report {
    let step = bounds.step;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return unreachable_report(label, format!("cannot start the runtime: {e}")),
    };
    let report = rt.block_on(async move {
        let mut seen = accept::Seen::default();
        let spreads = Spreads::default();
        let transport = match tokio::time::timeout(step, connect(args, &mut seen)).await {
            Ok(Ok(mut t)) => {
                // Line framing (not a WebSocket, whose messages come whole): a message
                // spread over several lines is read whole and said.
                if args.ws.is_none() {
                    t.reader = Box::new(SpreadReader::new(t.reader, spreads.clone()));
                }
                watched::watched(junk::with_junk_line(t))
            }
            Ok(Err(e)) => return unreachable_report(label, e),
            Err(_) => {
                let e = format!(
                    "no host connected within {}{}",
                    session::secs(step),
                    seen.summary()
                );
                return unreachable_report(label, e);
            }
        };
        let (transport, left, repeats, integral) = transport;
        let (peer, incoming) = Peer::new(transport, peer_config(step));
        let rec = Recorder::with(HOST_CATALOGUE, "mcpl check-host", false);
        let mut run = session::Run::new(peer, incoming, rec, bounds);
        run.left = left;
        run.repeats = repeats;
        run.integral = integral;
        run.spreads = spreads;
        let limit = bounds.session();
        if tokio::time::timeout(limit, run.exercise()).await.is_err() {
            // The kept policy Requests are answered, without their holds, while the
            // connection is still open (§6.7: every Request gets its receipt, in order).
            let _ = tokio::time::timeout(step, run.answer_kept()).await;
            run.cut_off(limit);
        }
        // The answers already owed to the host are written before the process exits (over
        // stdio a queued frame would otherwise be lost), for one step at most.
        run.peer.close();
        let _ = tokio::time::timeout(step, run.peer.finished()).await;
        run.finish(label)
    });
    // Stdin is read on a blocking thread that only returns once the host closes its end:
    // the run is over, so the runtime is not waited for.
    rt.shutdown_background();
    report
}

/// The one transport the host connects over: stdio, or the first connection to speak over
/// `--tcp`/`--ws` ([`accept::first_to_speak`]: a connection that ends, fails its WebSocket
/// handshake or stays silent is not the host, said on stderr and counted in `seen`).
async fn connect(args: &CheckHostArgs, seen: &mut accept::Seen) -> Result<Transport, String> {
    let (addr, websocket) = match (&args.tcp, &args.ws) {
        (Some(addr), _) => (addr, false),
        (_, Some(addr)) => (addr, true),
        _ => return Ok(stdio::stdio()),
    };
    let scheme = if websocket { "ws" } else { "tcp" };
    let listener = tokio::net::TcpListener::bind(addr.as_str())
        .await
        .map_err(|e| format!("cannot listen on {scheme} {addr}: {e}"))?;
    if let Ok(local) = listener.local_addr() {
        emit_err(&format!(
            "mcpl check-host: listening on {scheme}://{local}\n"
        ));
    }
    accept::first_to_speak(listener, websocket, seen).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented bound: 24 steps + the inference + the watch (151 s by default).
    #[test]
    fn the_wall_time_bound_is_the_documented_function() {
        let b = Bounds {
            step: Duration::from_secs(5),
            watch: Duration::from_secs(1),
            infer: Duration::from_secs(30),
        };
        assert_eq!(b.wall(), Duration::from_secs(151));
        let b = Bounds {
            step: Duration::from_secs(2),
            watch: Duration::ZERO,
            infer: Duration::from_secs(3),
        };
        assert_eq!(b.wall(), Duration::from_secs(51));
    }

    /// The catalogue keeps its ids unique, with the two issue #19 names exactly.
    #[test]
    fn catalogue_ids_are_unique_and_include_the_new_checks() {
        let mut ids: Vec<&str> = HOST_CATALOGUE.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), HOST_CATALOGUE.len());
        for id in ["host.requests-independent", "host.survives-junk-line"] {
            assert!(ids.contains(&id), "{id}");
        }
    }
}
