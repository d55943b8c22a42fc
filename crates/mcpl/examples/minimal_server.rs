//! The smallest useful MCPL server: one tool and one push-event feature set, over stdio.
//!
//! Run: `cargo run --example minimal_server` and speak JSON lines on stdin.

use mcpl::capability::Capability;
use mcpl::protocol::handshake::ToolsCallResult;
use mcpl::server::{PushEvent, Server, Session};
use schemars::JsonSchema;
use serde::Deserialize;

/// The `note` tool's arguments: its `inputSchema` is generated from this type.
#[derive(Deserialize, JsonSchema)]
struct Note {
    /// The note.
    text: Option<String>,
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
    let server = Server::builder("minimal", "0.1.0")
        .feature_set(
            "pings",
            "Push a note when the tool runs",
            &[Capability::PushEvents],
        )
        .typed_tool(
            "note",
            "Record a note and push it to the host",
            |session: Session, note: Note| async move {
                let text = note.text.unwrap_or_else(|| "(empty)".to_owned());
                // Only if granted and available; otherwise refused locally, nothing sent.
                let pushed = if session.feature_available("pings") {
                    session
                        .push_event(PushEvent::text("pings", text.clone()))
                        .await
                        .is_ok()
                } else {
                    false
                };
                Ok(ToolsCallResult::text(format!("noted (pushed: {pushed})")))
            },
        )
        .build()?;
    let reason = server.serve(mcpl::transport::stdio::stdio()).await;
    eprintln!("connection ended: {reason}");
    Ok(())
}
