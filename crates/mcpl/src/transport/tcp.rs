//! TCP: newline-delimited JSON over a TCP stream, as a client ([`connect`]) or as a server
//! ([`Listener`]) that accepts one session after another.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};

use super::listen::Listen;
use super::{BoxFuture, Transport};

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

    /// Waits for the next connection. Call again for the next session; an error (e.g.
    /// `EMFILE`) leaves the listener usable, but retrying at once may spin: a server loops
    /// with [`super::listen::serve`], which backs off.
    pub async fn accept(&self) -> io::Result<(Transport, SocketAddr)> {
        let (stream, addr) = self.inner.accept().await?;
        Ok((from_stream(stream), addr))
    }
}

/// Plain TCP has no transport handshake: the accepted stream is the transport.
impl Listen for Listener {
    type Accepted = TcpStream;

    fn accept_raw(&self) -> BoxFuture<'_, io::Result<(TcpStream, SocketAddr)>> {
        Box::pin(self.inner.accept())
    }

    fn handshake(
        &self,
        accepted: TcpStream,
        _addr: SocketAddr,
    ) -> BoxFuture<'static, Result<Transport, String>> {
        Box::pin(async move { Ok(from_stream(accepted)) })
    }
}
