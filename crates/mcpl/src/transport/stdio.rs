//! The current process's stdin and stdout as a newline-delimited transport (how an MCP
//! server launched by its host talks).
//!
//! Hosts hand their servers pipes (`std::process`, Python's `subprocess`) or Unix socket
//! pairs (Node's and Python asyncio's `child_process` and `subprocess`). On Unix, [`stdio`]
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
/// while the host is not reading; when both halves of the transport are dropped, each file's
/// mode is put back as it was. Anything else (a terminal, a regular file, a TCP socket,
/// stderr redirected into stdout, no runtime with I/O around) is read and written as
/// [`stdio_blocking`] does. Called within a tokio runtime, that runtime must have I/O enabled
/// (`enable_io`/`enable_all`), as for every byte-stream transport of this crate.
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
    use std::pin::Pin;
    use std::sync::Arc;
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
        // Registering with a reactor needs a runtime; outside one, the blocking path.
        tokio::runtime::Handle::try_current().ok()?;
        let input = stream(io::stdin().as_fd())?;
        let output = stream(io::stdout().as_fd())?;
        let restore = Arc::new(Restore::set(&[
            io::stdin().as_raw_fd(),
            io::stdout().as_raw_fd(),
        ])?);
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

    /// The status flags the stdio files had before the transport made them non-blocking;
    /// put back when the last half of the transport is dropped.
    struct Restore {
        saved: Vec<(RawFd, libc::c_int)>,
    }

    impl Restore {
        /// Makes each of `fds` non-blocking, unless that would also make stderr
        /// non-blocking (it shares one of their open files, e.g. `2>&1`): then every flag
        /// is put back and `None` returned.
        fn set(fds: &[RawFd]) -> Option<Restore> {
            let stderr = io::stderr().as_raw_fd();
            let stderr_before = flags(stderr);
            let mut restore = Restore { saved: Vec::new() };
            for &fd in fds {
                let f = flags(fd)?;
                restore.saved.push((fd, f));
                if !set_flags(fd, f | libc::O_NONBLOCK) {
                    return None;
                }
            }
            let stderr_after = flags(stderr);
            let shared = matches!((stderr_before, stderr_after),
                (Some(b), Some(a)) if b & libc::O_NONBLOCK == 0 && a & libc::O_NONBLOCK != 0);
            (!shared).then_some(restore)
        }
    }

    impl Drop for Restore {
        fn drop(&mut self) {
            // In reverse, so a file shared by two descriptors ends with its first flags.
            for &(fd, f) in self.saved.iter().rev() {
                set_flags(fd, f);
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
