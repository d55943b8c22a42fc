//! A child process spoken to over its stdin/stdout, its stderr passed through to ours.
//!
//! The child's exit ends the connection promptly even when a grandchild still holds its
//! stdout open: once the exit is observed, output already written is read for a short grace
//! period ([`EXIT_GRACE`]) and then the stream ends.
//!
//! When the connection closes, the child's stdin is closed (its EOF is the usual signal to
//! exit, as for MCP stdio servers); a child still running [`SHUTDOWN_GRACE`] later is killed.
//! [`ChildControl::kill`] kills at once. Output the child writes after the connection closed
//! is read and discarded until it exits, so a child logging on its way out does not die of
//! a broken pipe.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{ChildStdout, Command};
use tokio::sync::{watch, Notify};

use super::{BoxFuture, Frame, FrameReader, LineReader, LineWriter, Transport};

/// How long output is still read after the child has exited.
pub const EXIT_GRACE: Duration = Duration::from_millis(200);

/// How long a child may take to exit on its own after its stdin was closed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

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

/// Starts the graceful shutdown (wait, then kill) when the transport is dropped.
struct ShutdownOnDrop(Arc<Notify>);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// Spawns `command` with piped stdin/stdout and inherited stderr. Must be called inside a
/// tokio runtime.
pub fn spawn(command: &mut Command) -> io::Result<(Transport, ChildControl)> {
    command.stderr(Stdio::inherit());
    spawn_inner(command).map(|(transport, control, _)| (transport, control))
}

/// Like [`spawn`], but the child's stderr is piped and handed back for the caller to read
/// (e.g. to keep its last lines for a report and pass the rest through). The caller must
/// keep reading it: a child blocked on a full stderr pipe stops answering.
pub fn spawn_with_stderr(
    command: &mut Command,
) -> io::Result<(Transport, ChildControl, tokio::process::ChildStderr)> {
    command.stderr(Stdio::piped());
    let (transport, control, stderr) = spawn_inner(command)?;
    let stderr = stderr.ok_or_else(|| io::Error::other("child stderr was not piped"))?;
    Ok((transport, control, stderr))
}

/// Spawns `command` (stderr as the caller set it) with piped stdin/stdout.
fn spawn_inner(
    command: &mut Command,
) -> io::Result<(Transport, ChildControl, Option<tokio::process::ChildStderr>)> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let description = format!("child {:?}", command.as_std().get_program());
    let mut child = command.spawn()?;
    let stderr = child.stderr.take();
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
    let shutdown = Arc::new(Notify::new());
    let (kill_signal, shutdown_signal) = (kill.clone(), shutdown.clone());
    tokio::spawn(async move {
        let kill_now = async {
            kill_signal.notified().await;
        };
        let graceful = async {
            shutdown_signal.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        let status = tokio::select! {
            status = child.wait() => status,
            _ = kill_now => kill_and_wait(&mut child).await,
            _ = graceful => {
                tracing::debug!("child still running {SHUTDOWN_GRACE:?} after close; killing it");
                kill_and_wait(&mut child).await
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
        lines: Some(LineReader::new(stdout)),
        exit: exit_rx,
        grace_until: None,
    };
    let transport = Transport {
        reader: Box::new(reader),
        writer: Box::new(LineWriter::new(stdin)),
        guard: Some(Box::new(ShutdownOnDrop(shutdown))),
        description,
    };
    Ok((transport, control, stderr))
}

async fn kill_and_wait(child: &mut tokio::process::Child) -> io::Result<ExitStatus> {
    if let Err(e) = child.start_kill() {
        tracing::debug!("killing child: {e}");
    }
    child.wait().await
}

struct ChildReader {
    /// Always `Some` until dropped.
    lines: Option<LineReader<ChildStdout>>,
    exit: watch::Receiver<Option<io::Result<ExitStatus>>>,
    grace_until: Option<tokio::time::Instant>,
}

impl ChildReader {
    async fn read(&mut self) -> io::Result<Option<Frame>> {
        let Some(lines) = self.lines.as_mut() else {
            return Ok(None);
        };
        loop {
            if let Some(deadline) = self.grace_until {
                return match tokio::time::timeout_at(deadline, lines.read_frame()).await {
                    Ok(r) => r,
                    Err(_) => Ok(None),
                };
            }
            tokio::select! {
                biased;
                r = lines.read_frame() => return r,
                _ = exited(&mut self.exit) => {
                    self.grace_until = Some(tokio::time::Instant::now() + EXIT_GRACE);
                }
            }
        }
    }
}

/// Resolves once the child has exited (without holding the watch's read guard).
async fn exited(rx: &mut watch::Receiver<Option<io::Result<ExitStatus>>>) {
    let _ = rx.wait_for(|e| e.is_some()).await;
}

impl Drop for ChildReader {
    fn drop(&mut self) {
        let (Some(lines), Ok(handle)) = (self.lines.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let mut exit = self.exit.clone();
        handle.spawn(async move {
            let (mut rest, _unframed) = lines.into_parts();
            let mut sink = tokio::io::sink();
            tokio::select! {
                _ = tokio::io::copy(&mut rest, &mut sink) => {}
                _ = exited(&mut exit) => {}
            }
        });
    }
}

impl FrameReader for ChildReader {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        Box::pin(self.read())
    }

    fn set_max_message_size(&mut self, limit: usize) {
        if let Some(lines) = self.lines.as_mut() {
            lines.set_max_message_size(limit);
        }
    }

    fn unfinished(&self) -> Option<&[u8]> {
        self.lines.as_ref().and_then(FrameReader::unfinished)
    }

    fn ended_mid_line(&self) -> bool {
        self.lines.as_ref().is_some_and(FrameReader::ended_mid_line)
    }
}
