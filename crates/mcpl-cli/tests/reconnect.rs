//! Reconnect (RELIABILITY.md, §5.3): a host re-dials the reference server — by respawning
//! `mcpl serve --stdio`, and by reconnecting to `mcpl serve --ws` — and every new connection
//! runs the handshake and policy exchange from scratch. The new grant is computed from the
//! new connection alone: nothing of the previous session's grant survives.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use mcpl::capability::Capability;
use mcpl::host::{HostConfig, HostSession};
use mcpl::transport::{child, endpoint, Transport};

fn config(policy: &[&str]) -> HostConfig {
    HostConfig {
        policy: policy.iter().map(|p| p.to_string()).collect(),
        ..HostConfig::default()
    }
}

/// Connects one host session and checks its grant: `pushEvents` only when the policy has it.
async fn session_over(transport: Transport, with_push: bool) -> HostSession {
    let policy: &[&str] = if with_push {
        &["pushEvents", "tools"]
    } else {
        &["tools"]
    };
    let (session, _streams) = HostSession::connect(transport, config(policy))
        .await
        .expect("handshake and policy exchange");
    assert!(
        session.is_ready(),
        "each connection runs its own policy exchange"
    );
    assert_eq!(session.grant().allows(Capability::PushEvents), with_push);
    assert!(session.grant().allows(Capability::Tools));
    session
}

#[tokio::test]
async fn stdio_respawn_runs_the_policy_exchange_again_from_scratch() {
    let spawn = || {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpl"));
        cmd.args(["serve", "--stdio"]);
        child::spawn(&mut cmd).expect("spawn mcpl serve")
    };
    let (t1, c1) = spawn();
    let first = session_over(t1, true).await;
    first.close();
    drop(first);
    c1.kill();
    // Respawned with a narrower host policy: the new grant lacks pushEvents even though the
    // previous session held it.
    let (t2, c2) = spawn();
    let second = session_over(t2, false).await;
    second.close();
    c2.kill();
}

#[tokio::test]
async fn websocket_reconnect_runs_the_policy_exchange_again_from_scratch() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_mcpl"))
        .args(["serve", "--ws", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn mcpl serve --ws");
    // `mcpl serve` announces its address on stderr: "mcpl serve: listening on ws://…".
    let stderr = server.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("mcpl serve ended before listening")
            .expect("read stderr");
        if let Some(at) = line.find("ws://") {
            break line[at..].trim().to_owned();
        }
    };
    for with_push in [true, false, true] {
        let transport = endpoint::connect(&url, None).await.expect("dial");
        let session = session_over(transport, with_push).await;
        session.close();
    }
    let _ = server.kill();
    let _ = server.wait();
}
