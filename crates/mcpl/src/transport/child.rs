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
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::process::{ChildStdout, Command};
use tokio::sync::{watch, Notify};

use super::{BoxFuture, Frame, FrameReader, LineReader, LineWriter, MessageBudget, Transport};

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
    let program = command.as_std().get_program().to_owned();
    let description = format!("child {program:?}");
    let mut child = command.spawn().map_err(|e| SpawnFailed::wrap(program, e))?;
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

/// A child that could not be started: names its program, which the OS error alone does not
/// ("No such file or directory"); the error's kind and its source are the OS error's.
#[derive(Debug)]
struct SpawnFailed {
    program: std::ffi::OsString,
    source: io::Error,
}

impl SpawnFailed {
    fn wrap(program: std::ffi::OsString, source: io::Error) -> io::Error {
        io::Error::new(source.kind(), SpawnFailed { program, source })
    }
}

impl std::fmt::Display for SpawnFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot start {:?}: {}", self.program, self.source)
    }
}

impl std::error::Error for SpawnFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
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

// A wrapper forwards every method, defaulted ones too: a default left in place silently
// undoes what the line reader does (a `PeerConfig::message_budget` was ignored so).
#[deny(clippy::missing_trait_methods)]
impl FrameReader for ChildReader {
    fn next_frame(&mut self) -> BoxFuture<'_, io::Result<Option<Frame>>> {
        Box::pin(self.read())
    }

    /// Not polled in place: the read also watches for the child's exit (its grace period).
    fn poll_next_frame(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<Option<Frame>>>> {
        let _ = cx;
        None
    }

    fn recycle(&mut self, text: String) {
        if let Some(lines) = self.lines.as_mut() {
            lines.recycle(text);
        }
    }

    fn set_message_budget(&mut self, budget: MessageBudget) {
        if let Some(lines) = self.lines.as_mut() {
            lines.set_message_budget(budget);
        }
    }

    fn set_max_message_size(&mut self, limit: usize) {
        if let Some(lines) = self.lines.as_mut() {
            lines.set_max_message_size(limit);
        }
    }

    fn unfinished(&self) -> Option<&[u8]> {
        self.lines.as_ref().and_then(FrameReader::unfinished)
    }

    fn discarding(&self) -> Option<usize> {
        self.lines.as_ref().and_then(FrameReader::discarding)
    }

    fn ended_mid_line(&self) -> bool {
        self.lines.as_ref().is_some_and(FrameReader::ended_mid_line)
    }

    fn discarded_head(&self) -> Option<&[u8]> {
        self.lines.as_ref().and_then(FrameReader::discarded_head)
    }

    fn discarded_rest(&self) -> &[Vec<u8>] {
        self.lines.as_ref().map_or(&[], FrameReader::discarded_rest)
    }

    fn not_text_began_as_json(&self) -> bool {
        self.lines
            .as_ref()
            .is_some_and(FrameReader::not_text_began_as_json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that cannot be started is named in the error, whose kind stays the OS
    /// error's (a caller still matches `NotFound` / `PermissionDenied`). Before, the error
    /// was the bare OS one, "No such file or directory (os error 2)", naming nothing.
    #[tokio::test]
    async fn a_program_that_cannot_start_is_named_and_keeps_its_kind() {
        let missing = "/nonexistent/mcpl-no-such-program";
        let Err(e) = spawn(&mut Command::new(missing)) else {
            panic!("{missing} started");
        };
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains(missing), "{e}");
        let source = std::error::Error::source(e.get_ref().expect("wrapped"));
        assert!(source.is_some(), "the OS error is kept as the source");
        let Err(e) = spawn_with_stderr(&mut Command::new(missing)) else {
            panic!("{missing} started");
        };
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains(missing), "{e}");
    }

    /// The same for a file that is not executable (`PermissionDenied`).
    #[cfg(unix)]
    #[tokio::test]
    async fn a_program_that_is_not_executable_is_named_and_keeps_its_kind() {
        let path = std::env::temp_dir().join(format!("mcpl-not-executable-{}", std::process::id()));
        std::fs::write(&path, "not a program").unwrap();
        let result = spawn(&mut Command::new(&path));
        let _ = std::fs::remove_file(&path);
        let Err(e) = result else {
            panic!("{} started", path.display());
        };
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
    }
}
