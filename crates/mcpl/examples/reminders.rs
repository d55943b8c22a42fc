//! A reminders server (issue #21's walk-through), written as a new user would.
//!
//! - `remind(text, seconds)` is a typed tool that schedules a reminder. When it is due it is
//!   pushed under `reminders.push` (§9) if the grant allows it; a push the session refuses
//!   (or the host declines) keeps the reminder, due, for the next inference.
//! - Before each inference the `reminders.context` hook injects what is pending, at
//!   `beforeUser` (§10.1): the reminders still waiting, and the due ones that were not pushed
//!   (those only once).
//! - The first reminder enables a second tool on the live server, `snooze` (the host is sent
//!   `notifications/tools/list_changed`), and declares its feature set `reminders.snooze`
//!   with a typed manifest edit, which the host is told of with `mcpl/manifestChanged`
//!   (§17.3).
//!
//! State is per connection: each connection gets its own `Server` (this example serves one,
//! over stdio; a TCP server would call [`reminders`] for each accepted connection), so its
//! reminders, tools and manifest are that host's alone, and a reminder is pushed through the
//! session that scheduled it, never to another host.
//!
//! Run `cargo run -p mcpl --example reminders` (stdio; `RUST_LOG=debug` for more on stderr),
//! or check it live: `mcpl check --call remind '{"text":"tea","seconds":0}' --call remind
//! '{"text":"stretch","seconds":3600}' -- target/debug/examples/reminders`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mcpl::capability::Capability;
use mcpl::jsonrpc::ErrorObject;
use mcpl::policy::FeatureSetDeclaration;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::{BuildError, PushEvent, Server, Session, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

/// At most this many reminders wait on one connection; `remind` refuses more.
const MAX_PENDING: usize = 100;
/// The longest delay `remind` accepts: one week.
const MAX_SECONDS: u64 = 7 * 24 * 3600;

/// The `remind` tool's arguments (its `inputSchema` is generated from this type).
#[derive(Deserialize, JsonSchema)]
struct Remind {
    /// What to remind the user of.
    text: String,
    /// In how many seconds (0: now).
    seconds: u64,
}

/// The `snooze` tool's arguments.
#[derive(Deserialize, JsonSchema)]
struct Snooze {
    /// In how many seconds to remind again of the last reminder that fired.
    seconds: u64,
}

/// One reminder, until it has been pushed or injected.
struct Reminder {
    id: u64,
    text: String,
    /// Fired, but not pushed: injected at the next inference, then dropped.
    due: bool,
}

/// One connection's reminders.
#[derive(Default)]
struct Reminders {
    pending: Vec<Reminder>,
    last_fired: Option<String>,
    scheduled: u64,
}

type Shared = Arc<Mutex<Reminders>>;

fn lock(state: &Shared) -> MutexGuard<'_, Reminders> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Schedules `text` in `seconds` on `session`'s connection; the number of reminders
/// scheduled so far, or why not.
fn schedule(session: Session, state: &Shared, text: String, seconds: u64) -> Result<u64, String> {
    if seconds > MAX_SECONDS {
        return Err(format!("seconds is at most {MAX_SECONDS} (a week)"));
    }
    let (id, scheduled) = {
        let mut st = lock(state);
        if st.pending.len() >= MAX_PENDING {
            return Err(format!("at most {MAX_PENDING} reminders can wait at once"));
        }
        st.scheduled += 1;
        let id = st.scheduled;
        st.pending.push(Reminder {
            id,
            text: text.clone(),
            due: false,
        });
        (id, st.scheduled)
    };
    let state = state.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(seconds)) => {}
            _ = session.closed() => return,
        }
        let event = PushEvent::text("reminders.push", format!("Reminder: {text}"))
            .event_id(format!("reminder-{id}"));
        // The session refuses the push before the wire unless the grant allows it (§5.4).
        let pushed = match session.push_event(event).await {
            Ok(r) if r.accepted => true,
            Ok(r) => {
                tracing::info!("reminder {id} declined by the host: {:?}", r.reason);
                false
            }
            Err(e) => {
                tracing::info!("reminder {id} not pushed: {e}");
                false
            }
        };
        let mut st = lock(&state);
        st.last_fired = Some(text);
        if pushed {
            st.pending.retain(|r| r.id != id);
        } else if let Some(r) = st.pending.iter_mut().find(|r| r.id == id) {
            r.due = true;
        }
    });
    Ok(scheduled)
}

/// After the first reminder: the `snooze` tool and its feature set, on the live server.
fn enable_snooze(server: &Server, state: &Shared) -> Result<(), Box<dyn std::error::Error>> {
    server.tracker().edit(|m| {
        let uses = [Capability::Tools];
        m.add_feature_set(
            "reminders.snooze",
            FeatureSetDeclaration::new("Snooze a reminder that fired", &uses),
        )
    })?;
    let state = state.clone();
    server.add_tool(ToolSpec::typed(
        "snooze",
        "Remind again of the last reminder that fired",
        move |session, Snooze { seconds }| {
            let state = state.clone();
            async move {
                let Some(text) = lock(&state).last_fired.clone() else {
                    return Ok(ToolsCallResult::error("no reminder has fired yet"));
                };
                Ok(match schedule(session, &state, text, seconds) {
                    Ok(_) => ToolsCallResult::text(format!("snoozed for {seconds}s")),
                    Err(why) => ToolsCallResult::error(why),
                })
            }
        },
    ))?;
    Ok(())
}

/// A reminders server for one connection.
fn reminders() -> Result<Server, BuildError> {
    let state = Shared::default();
    let (for_tool, for_hook) = (state.clone(), state);
    Server::builder("reminders", "0.1.0")
        .feature_set(
            "reminders.push",
            "Push reminders when they are due",
            &[Capability::PushEvents],
        )
        .feature_set(
            "reminders.context",
            "Tell the model which reminders are pending",
            &[Capability::InjectBeforeUser],
        )
        .typed_tool(
            "remind",
            "Remind the user of something in a number of seconds",
            move |session: Session, Remind { text, seconds }| {
                let state = for_tool.clone();
                async move {
                    let server = session.server();
                    let scheduled = match schedule(session, &state, text, seconds) {
                        Ok(n) => n,
                        Err(why) => return Ok(ToolsCallResult::error(why)),
                    };
                    if scheduled == 1 {
                        if let Err(e) = enable_snooze(&server, &state) {
                            tracing::error!("snooze not enabled: {e}");
                        }
                    }
                    Ok::<_, ErrorObject>(ToolsCallResult::text(format!(
                        "reminder set for {seconds}s from now"
                    )))
                }
            },
        )
        .on_before_inference("reminders.context", move |_grant, _turn| {
            let lines: Vec<String> = {
                let mut st = lock(&for_hook);
                let lines = st
                    .pending
                    .iter()
                    .map(|r| match r.due {
                        true => format!("- due now: {}", r.text),
                        false => format!("- later: {}", r.text),
                    })
                    .collect();
                st.pending.retain(|r| !r.due);
                lines
            };
            let injection = (!lines.is_empty()).then(|| {
                let text = format!("The user's reminders:\n{}", lines.join("\n"));
                ContextInjection::new("reminders", Position::BeforeUser, text)
            });
            async move { Ok(BeforeInferenceResult::with_injections(injection)) }
        })
        .build()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Diagnostics (a refused push, a dropped injection …) on stderr, as stdout carries the
    // protocol: `warn` and up unless RUST_LOG says otherwise.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
    // Errors print with Display (what happened and what to change), not Debug.
    match reminders() {
        Ok(server) => {
            let reason = server.serve(mcpl::transport::stdio::stdio()).await;
            eprintln!("reminders: connection ended ({reason})");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
