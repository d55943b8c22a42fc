//! A memory server that injects context before inference (§10.1, §15.1).
//!
//! - `memory.recall` injects remembered facts at `beforeUser`. It reads the user message
//!   only when `observe` is granted (otherwise the host sends `null`), and the session drops
//!   any injection whose position is not granted before the response goes out.
//! - `memory.store` is an MCP tool that remembers a fact.
//! - `memory.extraction` counts finished turns through the built-in lifecycle consumer; the
//!   callback gets no session: nothing is ever sent because a turn ended (§14.5).
//!
//! Run: `cargo run --example memory_server` (stdio).

use std::sync::{Arc, Mutex};

use mcpl::capability::Capability;
use mcpl::lifecycle::TurnOutcome;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::server::Server;
use schemars::JsonSchema;
use serde::Deserialize;

/// The `remember` tool's arguments: its `inputSchema` is generated from this type, and a call
/// without a string `fact` is answered -32602 naming it.
#[derive(Deserialize, JsonSchema)]
struct Remember {
    /// The fact to remember.
    fact: String,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Diagnostics (a refused send, a dropped injection …) on stderr, as stdout carries the
    // protocol: `warn` and up unless RUST_LOG says otherwise.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
    // Errors print with Display (what happened and what to change), not Debug.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let facts: Arc<Mutex<Vec<String>>> = Arc::default();
    let completed = Arc::new(Mutex::new(0u64));
    let (f_store, f_recall, done) = (facts.clone(), facts.clone(), completed.clone());

    let server = Server::builder("memory", "0.1.0")
        .feature_set(
            "memory.recall",
            "Retrieve relevant memories before inference",
            &[Capability::Observe, Capability::InjectBeforeUser],
        )
        .feature_set(
            "memory.extraction",
            "Notice finished turns",
            &[Capability::InferenceLifecycle],
        )
        .feature_set(
            "memory.store",
            "Remember facts on request",
            &[Capability::Tools],
        )
        .typed_tool(
            "remember",
            "Remember a fact",
            move |_s, Remember { fact }: Remember| {
                let facts = f_store.clone();
                async move {
                    let n = {
                        let mut f = facts.lock().unwrap_or_else(|e| e.into_inner());
                        f.push(fact);
                        f.len()
                    };
                    Ok(ToolsCallResult::text(format!("{n} fact(s) remembered")))
                }
            },
        )
        .on_before_inference("memory.recall", move |_grant, p| {
            let facts = f_recall.clone();
            async move {
                let all = facts.lock().unwrap_or_else(|e| e.into_inner()).clone();
                // With observe, pick facts sharing a word with the message; without, all.
                let relevant: Vec<String> = match &p.user_message {
                    Some(msg) => {
                        let msg = msg.to_lowercase();
                        all.into_iter()
                            .filter(|f| {
                                f.to_lowercase().split_whitespace().any(|w| msg.contains(w))
                            })
                            .collect()
                    }
                    None => all,
                };
                let injection = (!relevant.is_empty()).then(|| {
                    let text = format!("Known facts:\n- {}", relevant.join("\n- "));
                    ContextInjection::new("memory", Position::BeforeUser, text)
                });
                // The session names the hook's feature set (`memory.recall`, §6.5).
                Ok(BeforeInferenceResult::with_injections(injection))
            }
        })
        .on_turn_end(move |turn| {
            if matches!(turn.outcome, TurnOutcome::Completed { .. }) {
                *done.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            }
        })
        .build()?;
    let reason = server.serve(mcpl::transport::stdio::stdio()).await;
    eprintln!(
        "connection ended ({reason}); {} completed turn(s) seen",
        completed.lock().unwrap_or_else(|e| e.into_inner())
    );
    Ok(())
}
