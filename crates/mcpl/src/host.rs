//! The host session: policy exchange, enforcement, hook fan-out, lifecycle and manifest review over a live connection.
