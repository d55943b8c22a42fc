//! A child process spoken to over its stdin/stdout, its stderr passed through to ours.
//!
//! The child's exit ends the connection promptly even when a grandchild still holds its
//! stdout open: once the exit is observed, output already written is read for a short grace
//! period ([`EXIT_GRACE`]) and then the stream ends. Dropping the transport (i.e. the peer
//! closing) kills the child.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{ChildStdout, Command};
use tokio::sync::{watch, Notify};

use super::{BoxFuture, Frame, FrameReader, LineReader, LineWriter, Transport};

/// How long output is still read after the child has exited.
pub const EXIT_GRACE: Duration = Duration::from_millis(200);

/// Control over a spawned child: its pid, killing it, and its exit status.
#[derive(Debug, Clone)]
pub struct ChildControl {
    pid: Option<u32>,
    kill: Arc<Notify>,
    exit: watch::Receiver<Option<io::Result<ExitStatus>>>,
}

impl ChildControl {
    /// The OS process id, if the child was still running when spawned.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Asks for the child to be killed (SIGKILL on Unix). Returns at once.
    pub fn kill(&self) {
        self.kill.notify_one();
    }

    /// Waits for the child to exit and returns its status (an error if waiting failed).
    pub async fn wait(&self) -> Result<ExitStatus, String> {
        let mut rx = self.exit.clone();
        let r = rx.wait_for(|e| e.is_some()).await;
        match r.as_deref() {
            Ok(Some(Ok(status))) => Ok(*status),
            Ok(Some(Err(e))) => Err(e.to_string()),
            _ => Err("child monitor ended".to_owned()),
        }
    }
}

/// Kills the child when the transport is dropped.
struct KillOnDrop(Arc<Notify>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// Spawns `command` with piped stdin/stdout and inherited stderr. Must be called inside a
/// tokio runtime.
pub fn spawn(command: &mut Command) -> io::Result<(Transport, ChildControl)> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let description = format!("child {:?}", command.as_std().get_program());
    let mut child = command.spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("child stdin was not piped"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("child stdout was not piped"))?;
    let pid = child.id();
    let kill = Arc::new(Notify::new());
    let (exit_tx, exit_rx) = watch::channel(None);
    let kill_signal = kill.clone();
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status,
            _ = kill_signal.notified() => {
                if let Err(e) = child.start_kill() {
                    tracing::debug!("killing child: {e}");
                }
                child.wait().await
            }
        };
        let _ = exit_tx.send(Some(status));
    });
    let control = ChildControl {
        pid,
        kill: kill.clone(),
        exit: exit_rx.clone(),
    };
    let reader = ChildReader {
        lines: LineReader::new(stdout),
        exit: exit_rx,
        grace_until: None,
    };
    let transport = Transport {
        reader: Box::new(reader),
        writer: Box::new(LineWriter::new(stdin)),
        guard: Some(Box::new(KillOnDrop(kill))),
        description,
    };
    Ok((transport, control))
}

struct ChildReader {
    lines: LineReader<ChildStdout>,
    exit: watch::Receiver<Option<io::Result<ExitStatus>>>,
    grace_until: Option<tokio::time::Instant>,
}

impl ChildReader {
    async fn read(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if let Some(deadline) = self.grace_until {
                return match tokio::time::timeout_at(deadline, self.lines.read_frame()).await {
                    Ok(r) => r,
                    Err(_) => Ok(None),
                };
            }
            tokio::select! {
                biased;
                r = self.lines.read_frame() => return r,
                _ = self.exit.wait_for(|e| e.is_some()) => {
                    self.grace_until = Some(tokio::time::Instant::now() + EXIT_GRACE);
                }
            }
        }
    }
}

impl FrameReader for ChildReader {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        Box::pin(self.read())
    }

    fn set_max_message_size(&mut self, limit: usize) {
        self.lines.set_max_message_size(limit);
    }
}
