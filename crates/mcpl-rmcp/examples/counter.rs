//! rmcp's counter server, served as an MCPL 0.5 server by `mcpl-rmcp`.
//!
//! The `#[tool_router]` below is the familiar rmcp counter (two tools, `increment` and
//! `get_value`); what MCPL adds is marked `// MCPL`:
//! - a feature set `counter` using `pushEvents` and `contextHooks.beforeInference.inject.system`;
//! - `increment` pushes an event when the counter reaches the alert threshold (`--threshold N`,
//!   default 3; each alert moves it up by the same step), through the `Session` rmcp's
//!   `Extension` extractor hands the tool, so the push is gated like any MCPL send (§5.3,
//!   §5.4, §6.5);
//! - a `beforeInference` hook injects the count at `system` (§10.1);
//! - beyond the minimal diff: the feature set's description names the next threshold, so an
//!   alert changes the manifest and the host is told with `mcpl/manifestChanged` (§17.3).
//!
//! Run over stdio: `cargo run -p mcpl-rmcp --example counter`; over TCP:
//! `cargo run -p mcpl-rmcp --example counter -- --tcp 127.0.0.1:0` (prints the bound address
//! on stderr). Check it live (the call makes the push happen):
//! `mcpl check --call increment '{}' -- target/debug/examples/counter --threshold 1`.

use std::sync::{Arc, Mutex};

use mcpl_rmcp::prelude::*; // MCPL
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{tool, tool_handler, tool_router, ErrorData as McpError, ServerHandler};

#[derive(Clone)]
pub struct Counter {
    counter: Arc<Mutex<i32>>,
    alert_at: Arc<Mutex<i32>>, // MCPL
    step: i32,                 // MCPL
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `counter` feature set's description: what it pushes and when.
fn describe(alert_at: i32) -> String {
    format!(
        "Pushes an event when the counter reaches {alert_at}; injects the count before inference"
    )
}

#[tool_router]
impl Counter {
    pub fn new(threshold: i32) -> Self {
        Self {
            counter: Arc::default(),
            alert_at: Arc::new(Mutex::new(threshold)),
            step: threshold.max(1),
        }
    }

    #[tool(description = "Increment the counter by 1")]
    async fn increment(
        &self,
        Extension(mcpl): Extension<Session>, // MCPL
    ) -> Result<CallToolResult, McpError> {
        let n = {
            let mut counter = lock(&self.counter);
            *counter += 1;
            *counter
        };
        let next = {
            let mut at = lock(&self.alert_at); // MCPL
            (n >= *at).then(|| {
                *at += self.step;
                *at
            })
        };
        if let Some(next) = next {
            // MCPL: push only where the host's grant leaves the set on (a push it does not
            // allow would be refused before the wire, and logged as this code's mistake).
            if mcpl.feature_available("counter") {
                let event = PushEvent::text("counter", format!("The counter reached {n}."));
                if let Err(e) = mcpl.push_event(event).await {
                    eprintln!("counter: push/event failed: {e}"); // on the wire: closed, refused …
                }
            }
            // Beyond the minimal diff: the manifest names the next threshold (§17.3).
            let _ = mcpl.tracker().transaction(|m| {
                if let Some(d) = m.pointer_mut("/featureSets/counter/description") {
                    *d = describe(next).into();
                }
            });
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(
            n.to_string(),
        )]))
    }

    #[tool(description = "Get the current counter value")]
    async fn get_value(&self) -> Result<CallToolResult, McpError> {
        let n = *lock(&self.counter);
        Ok(CallToolResult::success(vec![ContentBlock::text(
            n.to_string(),
        )]))
    }
}

#[tool_handler(
    name = "counter",
    version = "0.1.0",
    instructions = "A counter: increment it, read it"
)]
impl ServerHandler for Counter {}

/// The value after `flag` in `args`, if the flag is there.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).map(String::as_str)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Diagnostics (a refused send, a dropped injection …) on stderr, as stdout carries the
    // protocol: `warn` and up unless RUST_LOG says otherwise, and rmcp's lines quoting the
    // host's messages only if RUST_LOG names rmcp (`mcpl_rmcp::log_filter`).
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(mcpl_rmcp::log_filter(&filter))
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threshold = match flag(&args, "--threshold") {
        Some(n) => n.parse().map_err(|e| format!("--threshold {n}: {e}"))?,
        None => 3,
    };
    let counter = Counter::new(threshold);
    let count = counter.counter.clone(); // MCPL
    let uses = [Capability::PushEvents, Capability::InjectSystem]; // MCPL
    let server = mcpl_rmcp::builder(counter) // was: counter.serve(stdio())
        .feature_set("counter", describe(threshold), &uses) // MCPL
        .on_before_inference("counter", move |_grant, _turn| {
            let text = format!("The counter is at {}.", lock(&count)); // MCPL
            let injection = ContextInjection::new("counter", Position::System, text);
            async move { Ok(BeforeInferenceResult::with_injections([injection])) }
        })
        .build()?;
    match flag(&args, "--tcp") {
        None => {
            server.serve(mcpl::transport::stdio::stdio()).await;
        }
        Some(addr) => {
            let listener = mcpl::transport::tcp::Listener::bind(addr).await?;
            eprintln!("counter: listening on tcp://{}", listener.local_addr()?);
            loop {
                let (transport, _) = listener.accept().await?;
                let server = server.clone();
                tokio::spawn(async move { server.serve(transport).await });
            }
        }
    }
    Ok(())
}
