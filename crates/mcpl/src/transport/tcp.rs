//! TCP: newline-delimited JSON over a TCP stream, as a client ([`connect`]) or as a server
//! ([`Listener`]) that accepts one session after another.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};

use super::Transport;

/// Connects to `addr` and returns the transport.
pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<Transport> {
    let stream = TcpStream::connect(addr).await?;
    Ok(from_stream(stream))
}

/// Wraps an already-connected TCP stream.
pub fn from_stream(stream: TcpStream) -> Transport {
    let description = match stream.peer_addr() {
        Ok(a) => format!("tcp {a}"),
        Err(_) => "tcp".to_owned(),
    };
    // Small JSON-RPC messages should not wait for Nagle; failure to set it is harmless.
    let _ = stream.set_nodelay(true);
    let (r, w) = stream.into_split();
    Transport::lines(r, w, description)
}

/// A listening TCP socket handing out one transport per accepted connection.
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
}

impl Listener {
    /// Binds to `addr` (use port 0 for an ephemeral port, then [`Listener::local_addr`]).
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<Listener> {
        Ok(Listener {
            inner: TcpListener::bind(addr).await?,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Waits for the next connection. Call again for the next session.
    pub async fn accept(&self) -> io::Result<(Transport, SocketAddr)> {
        let (stream, addr) = self.inner.accept().await?;
        Ok((from_stream(stream), addr))
    }
}
