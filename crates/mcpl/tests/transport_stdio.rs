//! The stdio transport end to end: this test binary re-runs itself as a child process whose
//! stdin/stdout carry the connection (`transport::stdio` in the child, `transport::child` in
//! the parent). libtest's own chatter on the child's stdout ("running 1 test") is exactly the
//! kind of junk a logging server produces; it must be skipped with diagnostics.
#![cfg(feature = "runtime")]

use mcpl::peer::{CloseReason, Diagnostic, IncomingMessage, Peer, PeerConfig};
use mcpl::transport;
use serde_json::{json, Value};

const CHILD_ENV: &str = "MCPL_TEST_STDIO_CHILD";

/// Child mode: serve `echo` over stdio and ask the parent `hello` once.
async fn run_child() {
    let (peer, mut incoming) = Peer::new(transport::stdio::stdio(), PeerConfig::default());
    while let Some(msg) = incoming.recv().await {
        if let IncomingMessage::Request(r) = msg {
            if r.method() == "echo" {
                // A request in the other direction while the parent's request is open.
                let hello = peer.request_raw("hello", None).await.unwrap();
                let p = r.request().params.clone().unwrap_or(Value::Null);
                r.respond(json!({"echo": p, "parent": hello}))
                    .await
                    .unwrap();
            }
        }
    }
    assert_eq!(peer.closed().await, CloseReason::Eof);
}

#[tokio::test]
async fn stdio_transport_end_to_end() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return run_child().await;
    }
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "stdio_transport_end_to_end",
        "--nocapture",
        "--test-threads=1",
        // Quiet: libtest otherwise prints "test name ... " without a newline before the test
        // runs, gluing it to the child's first message on one (junk) line.
        "--quiet",
    ])
    .env(CHILD_ENV, "1");
    let (t, control) = transport::child::spawn(&mut cmd).unwrap();
    let (peer, mut incoming) = Peer::new(t, PeerConfig::default());
    let mut diags = peer.diagnostics();
    tokio::spawn(async move {
        while let Some(IncomingMessage::Request(r)) = incoming.recv().await {
            r.respond(json!("from parent")).await.unwrap();
        }
    });
    let r = peer
        .request_raw("echo", Some(json!({"x": [1, "two"]})))
        .await
        .unwrap();
    assert_eq!(
        r,
        json!({"echo": {"x": [1, "two"]}, "parent": "from parent"})
    );
    // Closing our side ends the child's stdin; it finishes its test and exits cleanly.
    peer.close();
    assert!(control.wait().await.unwrap().success());
    let mut junk = Vec::new();
    while let Some(d) = diags.try_recv() {
        if let Diagnostic::JunkLine { excerpt } = d {
            junk.push(excerpt);
        }
    }
    assert!(
        junk.iter().any(|l| l.contains("running 1 test")),
        "libtest's banner should have been skipped as junk: {junk:?}"
    );
}

/// The non-blocking stdio of issue #24 (Linux: the child reads its own descriptors' flags
/// from `/proc/self/fdinfo`). Each test re-runs this binary as a child whose stdio is what a
/// host hands over; the child answers any request with what its stdio looks like while the
/// transport is open, and after the connection ends checks that the flags are as before.
#[cfg(target_os = "linux")]
mod nonblocking {
    use super::*;
    use std::process::Stdio;

    const FLAGS_CHILD_ENV: &str = "MCPL_TEST_STDIO_FLAGS_CHILD";

    /// Whether `fd`'s open file is in non-blocking mode (`O_NONBLOCK`, octal 04000).
    fn nonblocking(fd: u32) -> bool {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        flags & 0o4000 != 0
    }

    /// The process's thread count.
    fn threads() -> i64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .map(|n| n.trim().parse().unwrap())
            .unwrap()
    }

    /// A pipe (read end, write end), close-on-exec (`std::io::pipe` is newer than the
    /// crate's MSRV).
    fn os_pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: `pipe2` writes two new descriptors into `fds`, which are owned from here on.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        }
    }

    /// Child mode: serve over `stdio()` until the host closes, then drop the runtime (and
    /// with it both halves) and require the flags to be back.
    fn run_flags_child() {
        run_flags_child_in(
            tokio::runtime::Builder::new_current_thread().enable_all(),
            false,
        );
    }

    /// [`run_flags_child`] in the runtime `builder` makes; when `overlap`, an earlier
    /// `stdio()` transport is still alive when the served one is made, and dropped just
    /// after (as when a first connection's reader half is still held by its task when the
    /// process serves its stdio again).
    fn run_flags_child_in(builder: &mut tokio::runtime::Builder, overlap: bool) {
        let before = (nonblocking(0), nonblocking(1));
        let threads_before = threads();
        let rt = builder.build().unwrap();
        rt.block_on(async {
            let earlier = overlap.then(transport::stdio::stdio);
            let (peer, mut incoming) = Peer::new(transport::stdio::stdio(), PeerConfig::default());
            drop(earlier);
            while let Some(msg) = incoming.recv().await {
                if let IncomingMessage::Request(r) = msg {
                    let answer = json!({
                        "stdin": nonblocking(0),
                        "stdout": nonblocking(1),
                        "newThreads": threads() - threads_before,
                    });
                    r.respond(answer).await.unwrap();
                }
            }
            peer.closed().await;
        });
        drop(rt);
        assert_eq!(
            (nonblocking(0), nonblocking(1)),
            before,
            "stdio flags put back once the transport is dropped"
        );
    }

    /// The child command: this test, alone and quiet, in child mode.
    fn child_command(test: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
            "--quiet",
        ])
        .env(FLAGS_CHILD_ENV, "1")
        .kill_on_drop(true);
        cmd
    }

    /// Asks the child what its stdio looks like over raw lines (skipping libtest's banner),
    /// then closes our writing side and reads to the end, so that libtest's last words
    /// after the transport closed find a reader.
    async fn ask<R, W>(read: R, mut write: W) -> Value
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin,
    {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"stdio\"}\n")
            .await
            .unwrap();
        let mut read = tokio::io::BufReader::new(read);
        let mut line = String::new();
        let answer = loop {
            line.clear();
            assert!(
                read.read_line(&mut line).await.unwrap() > 0,
                "child ended early"
            );
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if v["id"] == json!(1) {
                    break v["result"].clone();
                }
            }
        };
        write.shutdown().await.unwrap();
        drop(write);
        read.read_to_end(&mut Vec::new()).await.unwrap();
        answer
    }

    /// Runs `test` as a child on pipes (as `std::process` spawns), asks it, and requires
    /// its clean exit: the child checks its flags after the transport is gone.
    fn ask_over_pipes(test: &str) -> Value {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut cmd = child_command(test);
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
            ask_then_exit(child, stdout, stdin).await
        })
    }

    /// Asks `child` over `read`/`write` and requires its clean exit, each bounded by
    /// [`TIMEOUT`].
    async fn ask_then_exit<R, W>(child: tokio::process::Child, read: R, write: W) -> Value
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin,
    {
        let answer = tokio::time::timeout(TIMEOUT, ask(read, write))
            .await
            .expect("the child answers");
        exits_cleanly(child).await;
        answer
    }

    /// Whether this process is a test's child (it then plays the child's part).
    fn in_child() -> bool {
        std::env::var_os(FLAGS_CHILD_ENV).is_some()
    }

    /// Waits (bounded) for `child` to exit, and requires success.
    async fn exits_cleanly(mut child: tokio::process::Child) {
        let status = tokio::time::timeout(TIMEOUT, child.wait()).await.unwrap();
        assert!(status.unwrap().success(), "child checks its flags");
    }

    /// Pipes (how `std::process` and `transport::child` spawn): the reactor serves both
    /// ends, no thread is started for them, and the flags are put back at the end.
    #[test]
    fn pipes_are_served_without_threads_and_restored() {
        if in_child() {
            return run_flags_child();
        }
        let answer = ask_over_pipes("nonblocking::pipes_are_served_without_threads_and_restored");
        assert_eq!(
            answer,
            json!({"stdin": true, "stdout": true, "newThreads": 0})
        );
    }

    /// A Unix socket pair as stdin and stdout (how Node's `child_process` spawns, through
    /// libuv): served by the reactor too.
    #[test]
    fn unix_socket_is_served_without_threads_and_restored() {
        if in_child() {
            return run_flags_child();
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            let mut cmd =
                child_command("nonblocking::unix_socket_is_served_without_threads_and_restored");
            cmd.stdin(Stdio::from(std::os::fd::OwnedFd::from(
                theirs.try_clone().unwrap(),
            )))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
            let child = cmd.spawn().unwrap();
            drop(cmd);
            ours.set_nonblocking(true).unwrap();
            let (r, w) = tokio::net::UnixStream::from_std(ours).unwrap().into_split();
            let answer = ask_then_exit(child, r, w).await;
            assert_eq!(
                answer,
                json!({"stdin": true, "stdout": true, "newThreads": 0})
            );
        });
    }

    /// stderr on the same pipe as stdout (`2>&1`): making stdout non-blocking would make
    /// stderr non-blocking too, so a full pipe could fail an `eprintln!`. Both stay blocking
    /// and the transport still works.
    #[test]
    fn stderr_sharing_stdout_keeps_stdio_blocking() {
        if in_child() {
            return run_flags_child();
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (read, write) = os_pipe();
            let mut cmd = child_command("nonblocking::stderr_sharing_stdout_keeps_stdio_blocking");
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::from(write.try_clone().unwrap()))
                .stderr(Stdio::from(write));
            let mut child = cmd.spawn().unwrap();
            drop(cmd);
            let stdin = child.stdin.take().unwrap();
            let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(read).unwrap();
            let answer = ask_then_exit(child, stdout, stdin).await;
            assert_eq!(answer["stdin"], json!(false));
            assert_eq!(answer["stdout"], json!(false));
        });
    }

    /// Two `stdio()` transports whose lives overlap (an earlier one dropped after the next
    /// was made): the later one must stay non-blocking while it lives (the earlier one's end
    /// must not switch the files back to blocking under the reactor), and the flags must be
    /// back to blocking at the end (not to the non-blocking ones the later one found).
    #[test]
    fn overlapping_transports_keep_stdio_nonblocking_and_restore_it() {
        if in_child() {
            return run_flags_child_in(
                tokio::runtime::Builder::new_current_thread().enable_all(),
                true,
            );
        }
        let answer = ask_over_pipes(
            "nonblocking::overlapping_transports_keep_stdio_nonblocking_and_restore_it",
        );
        assert_eq!(answer["stdin"], json!(true), "{answer}");
        assert_eq!(answer["stdout"], json!(true), "{answer}");
    }

    /// A runtime without I/O (`enable_time` only) served `stdio()` before issue #24 (tokio's
    /// `stdin()`/`stdout()` need a runtime, not its reactor): it still does, on the blocking
    /// path, with stdio left blocking, instead of panicking in tokio's registration.
    #[test]
    fn runtime_without_io_falls_back_to_blocking_stdio() {
        if in_child() {
            return run_flags_child_in(
                tokio::runtime::Builder::new_current_thread().enable_time(),
                false,
            );
        }
        let answer = ask_over_pipes("nonblocking::runtime_without_io_falls_back_to_blocking_stdio");
        assert_eq!(answer["stdin"], json!(false), "{answer}");
        assert_eq!(answer["stdout"], json!(false), "{answer}");
    }

    /// Child mode of [`replaced_stdout_is_switched_by_a_later_transport`].
    fn run_replaced_stdout_child() {
        use std::os::fd::AsRawFd;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let first = transport::stdio::stdio();
            assert!(
                nonblocking(0) && nonblocking(1),
                "the first transport switched"
            );
            // fd 1 becomes a fresh (blocking) pipe while the first transport lives.
            // SAFETY: `dup`/`dup2` on open descriptors of this process; `saved` keeps the
            // original stdout to put back.
            let (_read, write) = os_pipe();
            let saved = unsafe { libc::dup(1) };
            assert!(saved >= 0);
            assert_eq!(unsafe { libc::dup2(write.as_raw_fd(), 1) }, 1);
            assert!(!nonblocking(1));
            let second = transport::stdio::stdio();
            assert!(
                nonblocking(1),
                "the later transport switched the new stdout"
            );
            drop(first);
            assert!(nonblocking(1), "still switched while the later one lives");
            drop(second);
            assert!(!nonblocking(1), "the new stdout put back");
            assert!(!nonblocking(0), "stdin put back");
            assert_eq!(unsafe { libc::dup2(saved, 1) }, 1);
            unsafe { libc::close(saved) };
            assert!(!nonblocking(1), "the original stdout put back");
        });
    }

    /// A file put on fd 1 (`dup2`) while a transport lives is switched by the next
    /// transport, which must never hand the reactor a blocking descriptor; every file
    /// switched is put back when the last transport is dropped.
    #[test]
    fn replaced_stdout_is_switched_by_a_later_transport() {
        if in_child() {
            return run_replaced_stdout_child();
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut cmd =
                child_command("nonblocking::replaced_stdout_is_switched_by_a_later_transport");
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let mut stdout = child.stdout.take().unwrap();
            let drain = tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let _ = stdout.read_to_end(&mut Vec::new()).await;
            });
            exits_cleanly(child).await;
            drain.await.unwrap();
        });
    }

    /// Bound on a child's answer and exit in the tests above that could otherwise hang.
    const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
}
