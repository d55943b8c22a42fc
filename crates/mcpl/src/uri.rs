//! `mcpl://` URIs (RFC-004): string-level rejections, rewriting to `wss:` and the three resolved values.
