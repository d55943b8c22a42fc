//! A channel bridge: a fake chat platform living in memory, exposed as MCPL channels.
//!
//! - after the policy receipt it registers its rooms (`channels/register`);
//! - a background "platform" produces user messages, forwarded with `channels/incoming`
//!   (only while `channels.incoming` is granted — the session refuses otherwise);
//! - `channels/publish` is the only delivery path: it appends to the room's history;
//! - `channels/outgoing/chunk|complete` are observed for live rendering only. Those handlers
//!   get no session, so they cannot deliver (§14.5).
//!
//! Run: `cargo run --example channel_bridge -- 127.0.0.1:7700` (TCP; one host at a time).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use mcpl::capability::Capability;
use mcpl::jsonrpc::ErrorObject;
use mcpl::protocol::channels::{
    Author, ChannelDescriptor, ChannelDirection, IncomingMessage, ListResult, PublishResult,
};
use mcpl::protocol::content::{Content, ContentBlock};
use mcpl::server::{utc_now_iso8601, Server, Session};

/// The fake platform: rooms and their message history.
#[derive(Default)]
struct Platform {
    rooms: BTreeMap<String, Vec<String>>,
}

fn room(id: &str) -> ChannelDescriptor {
    ChannelDescriptor::new(format!("fakechat:{id}"), "fakechat")
        .with_label(format!("#{id}"))
        .with_direction(ChannelDirection::Bidirectional)
}

fn lock(p: &Mutex<Platform>) -> std::sync::MutexGuard<'_, Platform> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Diagnostics (a refused send, a dropped injection …) on stderr: `warn` and up unless RUST_LOG says otherwise.
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
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7700".into());
    let platform = Arc::new(Mutex::new(Platform::default()));
    for r in ["general", "random"] {
        lock(&platform)
            .rooms
            .insert(format!("fakechat:{r}"), Vec::new());
    }
    let (p_publish, p_list) = (platform.clone(), platform.clone());

    let server = Server::builder("fakechat-bridge", "0.1.0")
        .feature_set(
            "chat.bridge",
            "Bridge the fakechat rooms",
            &[
                Capability::ChannelsRegister,
                Capability::ChannelsPublish,
                Capability::ChannelsIncoming,
                Capability::ChannelsStreaming,
            ],
        )
        .on_ready(|session: Session| async move {
            if !session.granted(Capability::ChannelsRegister) {
                return;
            }
            match session
                .channels_register(vec![room("general"), room("random")])
                .await
            {
                Ok(r) => eprintln!("registered: {:?}", r.results),
                Err(e) => eprintln!("register refused: {e}"),
            }
            // The platform's users start talking once we are registered.
            tokio::spawn(simulate_users(session));
        })
        .on_channels_publish(move |_s, p| {
            let platform = p_publish.clone();
            async move {
                let mut pf = lock(&platform);
                let Some(history) = pf.rooms.get_mut(&p.channel_id) else {
                    return Err(ErrorObject::unknown_channel(&p.channel_id));
                };
                let text = match &p.content {
                    Content::Text(t) => t.clone(),
                    Content::Blocks(b) => format!("{} block(s)", b.len()),
                };
                history.push(format!("agent: {text}"));
                let message_id = format!("{}#{}", p.channel_id, history.len());
                Ok(PublishResult::delivered(Some(message_id)))
            }
        })
        .on_channels_list(move |_s| {
            let platform = p_list.clone();
            async move {
                let ids: Vec<String> = lock(&platform).rooms.keys().cloned().collect();
                let channels = ids
                    .iter()
                    .map(|id| room(id.trim_start_matches("fakechat:")))
                    .collect();
                Ok(ListResult::new(channels))
            }
        })
        .on_outgoing_chunk(|c| eprintln!("[{}] typing… {}", c.channel_id, c.delta))
        .on_outgoing_complete(|c| eprintln!("[{}] stream settled", c.channel_id))
        .build()?;

    let listener = mcpl::transport::tcp::Listener::bind(addr.as_str()).await?;
    eprintln!("fakechat bridge on {}", listener.local_addr()?);
    loop {
        let (transport, peer) = listener.accept().await?;
        eprintln!("host connected from {peer}");
        let reason = server.serve(transport).await;
        eprintln!("host disconnected: {reason}");
    }
}

/// The platform's users: a few messages, forwarded as `channels/incoming`.
async fn simulate_users(session: Session) {
    for (i, text) in ["hi bot", "what's the weather?", "thanks!"]
        .iter()
        .enumerate()
    {
        let msg = IncomingMessage::new(
            "fakechat:general",
            format!("m{i}"),
            ContentBlock::text(*text),
        )
        .with_author(Author::new("u1", Some("Alice".into())))
        .with_timestamp(utc_now_iso8601())
        .with_tags(["chat:mention", "chat:addressed"]);
        // Refused locally if channels.incoming is not (or no longer) granted.
        if let Err(e) = session.channels_incoming(vec![msg]).await {
            eprintln!("incoming not forwarded: {e}");
            return;
        }
    }
}
