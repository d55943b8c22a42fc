//! The server session: the API a Rust MCPL server author writes against.
