//! Playing the server's side of a host connection over a real peer: shared by the host
//! tests that script a server by hand.

use mcpl::peer::{Incoming, IncomingMessage, IncomingRequest};

/// The next request from the host, which must be `method`; notifications in between are
/// skipped. Panics if the connection ends or another request comes first.
pub async fn next_request(incoming: &mut Incoming, method: &str) -> IncomingRequest {
    loop {
        match incoming.recv().await.expect("connection ended") {
            IncomingMessage::Request(r) if r.method() == method => return r,
            IncomingMessage::Request(r) => panic!("expected {method}, got {}", r.method()),
            IncomingMessage::Notification(_) => {}
        }
    }
}
