//! Transports: newline-delimited JSON framing over stdio, TCP, child processes, WebSocket (ws/wss) and an in-memory pair.
