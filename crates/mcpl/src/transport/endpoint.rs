//! Dialling a server by address: `tcp://HOST:PORT`, `ws://…`, `wss://…` and `mcpl://…`
//! (RFC-004, resolved through [`crate::uri`] before anything is dialled).
//!
//! `wss://` (and `mcpl://`, which always means `wss:`) uses the caller's rustls
//! configuration when one is given, and otherwise the Mozilla root store of `webpki-roots`.

use std::sync::Arc;

use crate::transport::{tcp, ws, Transport};
use crate::uri::{self, EndpointUri, RejectReason};

/// Why an endpoint could not be dialled.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The address is not `tcp://`, `ws://`, `wss://` or `mcpl://`.
    #[error("unsupported endpoint {0:?}: use tcp://HOST:PORT, ws://…, wss://… or mcpl://…")]
    Unsupported(String),
    /// The `mcpl://`/`ws(s)://` URI was refused by RFC-004's rules.
    #[error("refused URI {uri:?}: {reason} ({code})", code = reason.code())]
    Refused {
        /// The URI as given; one refused as too long ([`RejectReason::TooLong`]) only up to
        /// its first [`REFUSED_URI_SHOWN_BYTES`], then `…`, so the error stays readable.
        uri: String,
        /// Why it was refused.
        reason: RejectReason,
    },
    /// TCP connect failed.
    #[error("cannot connect to {addr}: {source}; check that a server listens there (host, port, firewall)")]
    Tcp {
        /// The address dialled.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The WebSocket (or its TLS) handshake failed.
    #[error("cannot open {url}: {source}")]
    Ws {
        /// The URL dialled.
        url: String,
        /// The WebSocket error.
        source: ws::WsError,
    },
}

/// A rustls client configuration trusting the `webpki-roots` (Mozilla) root store, using the
/// ring provider the crate is built with.
pub fn default_tls_config() -> Arc<rustls::ClientConfig> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth());
    match config {
        Ok(c) => Arc::new(c),
        // The ring provider supports the default protocol versions; this arm only guards
        // against a future provider change, falling back to the process default.
        Err(_) => Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                })
                .with_no_client_auth(),
        ),
    }
}

/// Resolves a WebSocket-family URI (`mcpl://`, `ws://`, `wss://`) per RFC-004 without dialling.
pub fn resolve_ws(uri: &str) -> Result<EndpointUri, EndpointError> {
    uri::resolve(uri).map_err(|reason| {
        let uri = if matches!(reason, RejectReason::TooLong { .. }) {
            let mut end = uri.len().min(REFUSED_URI_SHOWN_BYTES);
            while !uri.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", uri.get(..end).unwrap_or_default())
        } else {
            uri.to_owned()
        };
        EndpointError::Refused { uri, reason }
    })
}

/// How much of a URI refused as too long [`EndpointError::Refused`] keeps (256 bytes).
pub const REFUSED_URI_SHOWN_BYTES: usize = 256;

/// Dials `target` and returns its transport. `tls` overrides the root store for `wss:`.
/// A WebSocket dial gives up after [`ws::CONNECT_TIMEOUT`]; a `tcp://` connect is bounded by
/// the operating system's own connect timeout.
pub async fn connect(
    target: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Transport, EndpointError> {
    if let Some(addr) = target.strip_prefix("tcp://") {
        let addr = addr.trim_end_matches('/');
        return tcp::connect(addr)
            .await
            .map_err(|source| EndpointError::Tcp {
                addr: addr.to_owned(),
                source,
            });
    }
    let scheme = target.split(':').next().unwrap_or("").to_ascii_lowercase();
    if !matches!(scheme.as_str(), "mcpl" | "ws" | "wss") {
        return Err(EndpointError::Unsupported(target.to_owned()));
    }
    let endpoint = resolve_ws(target)?;
    let url = endpoint.resolved_transport().to_owned();
    let tls = if url.starts_with("wss:") {
        Some(tls.unwrap_or_else(default_tls_config))
    } else {
        None
    };
    ws::connect(&url, tls)
        .await
        .map_err(|source| EndpointError::Ws { url, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rfc004_refusals_happen_before_dialling() {
        let err = connect("mcpl://user@example.com/x", None)
            .await
            .unwrap_err();
        match err {
            EndpointError::Refused { reason, .. } => assert_eq!(reason.code(), "userinfo"),
            other => panic!("expected a refusal, got {other}"),
        }
    }

    #[tokio::test]
    async fn unknown_schemes_are_unsupported() {
        assert!(matches!(
            connect("http://example.com", None).await,
            Err(EndpointError::Unsupported(_))
        ));
    }

    #[tokio::test]
    async fn tcp_and_ws_endpoints_dial() {
        let listener = tcp::Listener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
        connect(&format!("tcp://{addr}"), None).await.unwrap();
        accept.await.unwrap().unwrap();

        let wsl = ws::Listener::bind("127.0.0.1:0", None).await.unwrap();
        let addr = wsl.local_addr().unwrap();
        let accept = tokio::spawn(async move { wsl.accept().await.map(|_| ()) });
        connect(&format!("ws://{addr}/mcpl"), None).await.unwrap();
        accept.await.unwrap().unwrap();
    }

    #[test]
    fn default_tls_config_has_roots() {
        let _ = default_tls_config();
    }
}
