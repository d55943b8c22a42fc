//! The current process's stdin and stdout as a newline-delimited transport (how an MCP
//! server launched by its host talks).
//!
//! Hosts hand their servers pipes (`std::process`, Python's `subprocess`) or Unix socket
//! pairs (Node's `child_process`, through libuv). On Unix, [`stdio`]
//! reads and writes those through the runtime's reactor, like a socket; tokio's own
//! `stdin()`/`stdout()` instead do every read and write on its blocking pool, and a server's
//! setup then starts a thread per pending read or write (five for one handshake; issue #24
//! measures the setup, BENCHMARKS.md has the figures).

use super::Transport;

/// A transport reading stdin and writing stdout. Nothing else in the process may read stdin
/// or write stdout while it is in use (log to stderr instead).
///
/// On Unix, when stdin and stdout are each a pipe or a Unix socket and stderr does not share
/// either's open file, both are switched to non-blocking mode for the transport's life and
/// served by the reactor: no thread per read or write. The mode belongs to the open file
/// (`O_NONBLOCK`), so a `println!` elsewhere in the process may now fail with `WouldBlock`
/// while the host is not reading; once both halves of every such transport are dropped, each
/// file switched is put back in blocking mode. Anything else (a terminal, a regular file, a
/// TCP socket, stderr redirected into stdout, no runtime, or a runtime without I/O enabled,
/// which then prints tokio's panic message once as it is probed) is read and written as
/// [`stdio_blocking`] does.
pub fn stdio() -> Transport {
    #[cfg(unix)]
    if let Some(transport) = unix::nonblocking() {
        return transport;
    }
    stdio_blocking()
}

/// stdin and stdout through tokio's blocking pool, never switched to non-blocking mode: for
/// a process that shares its stdio with code that expects blocking writes.
pub fn stdio_blocking() -> Transport {
    Transport::lines(tokio::io::stdin(), tokio::io::stdout(), "stdio")
}

#[cfg(unix)]
mod unix {
    use std::io;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
    use std::os::unix::fs::FileTypeExt;
    use std::panic::AssertUnwindSafe;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::Transport;

    /// What one stdio descriptor is, with a duplicate of it to hand to the reactor.
    enum Stream {
        Fifo(OwnedFd),
        UnixSocket(std::os::unix::net::UnixStream),
    }

    /// The stdio transport on non-blocking pipes or sockets, or `None` where that is not
    /// known to be safe (see [`super::stdio`]).
    pub(super) fn nonblocking() -> Option<Transport> {
        // Registering with a reactor needs a runtime with I/O; without, the blocking path.
        tokio::runtime::Handle::try_current().ok()?;
        let input = stream(io::stdin().as_fd())?;
        let output = stream(io::stdout().as_fd())?;
        if !reactor_present() {
            return None;
        }
        let restore = Arc::new(Restore::set(&[io::stdin().as_fd(), io::stdout().as_fd()])?);
        let reader: Box<dyn AsyncRead + Send + Unpin> = match input {
            Stream::Fifo(fd) => {
                Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd).ok()?)
            }
            Stream::UnixSocket(s) => Box::new(tokio::net::UnixStream::from_std(s).ok()?),
        };
        let writer: Box<dyn AsyncWrite + Send + Unpin> = match output {
            Stream::Fifo(fd) => {
                Box::new(tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(fd).ok()?)
            }
            Stream::UnixSocket(s) => Box::new(tokio::net::UnixStream::from_std(s).ok()?),
        };
        Some(Transport::lines(
            Restoring {
                inner: reader,
                _restore: restore.clone(),
            },
            Restoring {
                inner: writer,
                _restore: restore,
            },
            "stdio",
        ))
    }

    /// Whether the current runtime has I/O enabled. Tokio has no query for it and panics on
    /// registering a file without it, so a socket of our own is registered, before any flag
    /// is changed (the panic message is printed: the price of a runtime without I/O).
    fn reactor_present() -> bool {
        let Ok((probe, _peer)) = std::os::unix::net::UnixStream::pair() else {
            return false;
        };
        if probe.set_nonblocking(true).is_err() {
            return false;
        }
        std::panic::catch_unwind(AssertUnwindSafe(move || {
            tokio::net::UnixStream::from_std(probe).is_ok()
        }))
        .unwrap_or(false)
    }

    /// A duplicate of `fd` if it is a pipe or a Unix socket.
    fn stream(fd: BorrowedFd<'_>) -> Option<Stream> {
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        let kind = file.metadata().ok()?.file_type();
        if kind.is_fifo() {
            return Some(Stream::Fifo(file.into()));
        }
        if kind.is_socket() {
            let s = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
            // `local_addr` fails unless the socket is `AF_UNIX` (a TCP socket from inetd is
            // left to the blocking path).
            s.local_addr().ok()?;
            return Some(Stream::UnixSocket(s));
        }
        None
    }

    /// The file status flags of `fd`, `None` if it is not open.
    fn flags(fd: RawFd) -> Option<libc::c_int> {
        // SAFETY: `F_GETFL` reads the flags of a descriptor number; an unopened one is
        // reported as `-1`/`EBADF`, never undefined behaviour.
        let f = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        (f >= 0).then_some(f)
    }

    fn set_flags(fd: RawFd, f: libc::c_int) -> bool {
        // SAFETY: `F_SETFL` on a descriptor number changes only its open file's status
        // flags; failure is reported as `-1`.
        unsafe { libc::fcntl(fd, libc::F_SETFL, f) == 0 }
    }

    /// The stdio files this process switched to non-blocking mode (duplicates, so they are
    /// switched back even if fd 0 or 1 was replaced meanwhile), and how many live transports
    /// rely on that: one per process, so a transport made while an earlier one still lives
    /// neither takes the switched mode for the original nor has it undone under it.
    struct Switched {
        holders: usize,
        files: Vec<OwnedFd>,
    }

    static SWITCHED: Mutex<Switched> = Mutex::new(Switched {
        holders: 0,
        files: Vec::new(),
    });

    fn switched() -> MutexGuard<'static, Switched> {
        SWITCHED.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `files` back in blocking mode, last first.
    fn switch_back(files: &[OwnedFd]) {
        for fd in files.iter().rev() {
            if let Some(f) = flags(fd.as_raw_fd()) {
                set_flags(fd.as_raw_fd(), f & !libc::O_NONBLOCK);
            }
        }
    }

    /// One live transport's hold on the non-blocking mode of the stdio files; the last one
    /// dropped puts back blocking mode on the files that were switched.
    struct Restore;

    impl Restore {
        /// Makes each of `fds` non-blocking (those that are not yet: a later transport
        /// joins the mode an earlier one set, and switches only a file put in place since,
        /// e.g. by a `dup2` over fd 1), unless that would also make stderr non-blocking (it
        /// shares one of their open files, e.g. `2>&1`): then what it switched is put back
        /// and `None` returned.
        fn set(fds: &[BorrowedFd<'_>]) -> Option<Restore> {
            let mut state = switched();
            let stderr = io::stderr().as_raw_fd();
            let stderr_before = flags(stderr);
            let mut files = Vec::new();
            let mut ok = true;
            for fd in fds {
                let Some(f) = flags(fd.as_raw_fd()) else {
                    ok = false;
                    break;
                };
                if f & libc::O_NONBLOCK != 0 {
                    continue;
                }
                let Ok(dup) = fd.try_clone_to_owned() else {
                    ok = false;
                    break;
                };
                if !set_flags(dup.as_raw_fd(), f | libc::O_NONBLOCK) {
                    ok = false;
                    break;
                }
                files.push(dup);
            }
            let stderr_after = flags(stderr);
            let shared = matches!((stderr_before, stderr_after),
                (Some(b), Some(a)) if b & libc::O_NONBLOCK == 0 && a & libc::O_NONBLOCK != 0);
            if !ok || shared {
                switch_back(&files);
                return None;
            }
            state.holders += 1;
            state.files.extend(files);
            Some(Restore)
        }
    }

    impl Drop for Restore {
        fn drop(&mut self) {
            let mut state = switched();
            state.holders -= 1;
            if state.holders == 0 {
                switch_back(&std::mem::take(&mut state.files));
            }
        }
    }

    /// One half of the transport; the flags are restored once both halves are gone (the
    /// reactor's duplicate is closed first: `inner` drops before `_restore`).
    struct Restoring<T> {
        inner: T,
        _restore: Arc<Restore>,
    }

    impl<T: AsyncRead + Unpin> AsyncRead for Restoring<T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl<T: AsyncWrite + Unpin> AsyncWrite for Restoring<T> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        /// Flushes only: stdout stays open, as with the blocking path (a Unix socket's
        /// shutdown would end the host's stream while the process lives on).
        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
    }
}
