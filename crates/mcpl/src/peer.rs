//! The bidirectional JSON-RPC connection: a cloneable handle for outgoing requests and notifications, a stream of incoming messages, pending-request matching and timeouts.
