//! `mcpl://` URIs (RFC-004): string-level rejections, rewriting to `wss:` and the three
//! resolved values.
//!
//! [`resolve`] implements the RFC-004 §3 algorithm:
//!
//! 1. reject the §2.1 forms with string-level checks on the input, before any parsing;
//! 2. substitute the scheme `mcpl:` → `wss:`;
//! 3. parse with the WHATWG-conformant [`url`] crate — that value *is* the resolved transport;
//! 4. map the scheme of that same value back to `mcpl:` to get the canonical form.
//!
//! The result keeps all three values of RFC-004 §5 side by side ([`EndpointUri`]) and never
//! derives one by overwriting another.
//!
//! # Other schemes
//!
//! RFC-004 §2.2 requires `ws://` and `wss://` to stay accepted, so [`resolve`] accepts them
//! too; every other scheme (including `mcpls:`, `http:`, `https:`) is refused with
//! [`RejectReason::UnsupportedScheme`] (RFC-004 §2, §11). Readings where the RFC is silent,
//! resolved fail-closed:
//!
//! - The §2.1 string-level rejections (fragment, userinfo, empty authority, dot segments, …)
//!   are applied to `ws://` and `wss://` input as well: each guards against a *silent change
//!   of meaning* (`wss:///evil` dials host `evil` exactly like `mcpl:///evil` does), and
//!   that danger does not depend on the spelling of the scheme.
//! - For `ws://`/`wss://` input the canonical value is the WHATWG-normalised URL *in its own
//!   scheme*: `mcpl://` never denotes plaintext (§2), so a `ws://` URI has no `mcpl://`
//!   form, and a `wss://` URI is not promoted to an `mcpl://` identity the author did not
//!   write. Two configurations are therefore only deduplicated when they agree on scheme
//!   spelling; compare [`EndpointUri::resolved_transport`] to learn whether they dial the
//!   same socket.
//! - Characters that a WHATWG parser silently strips or reinterprets (ASCII control
//!   characters, space, and `\`, which special schemes read as `/`) are rejected as
//!   [`RejectReason::InvalidCharacter`] rather than normalised away.
//! - `mcpl:host/x` (no `//`) does not match the §2 grammar and is rejected as
//!   [`RejectReason::MissingAuthority`]; a special-scheme parser would otherwise invent one.
//! - When an input has several defects, the reported reason is the first failing check in
//!   the order: length, scheme, characters, authority marker, fragment, userinfo, empty authority,
//!   port, dot segments, then the parser.
//!
//! # Authority
//!
//! Resolution is a locator only (RFC-004 §7): an [`EndpointUri`] grants no capability,
//! accepts no tag ontology and admits no channel. Egress and SSRF policy stay the host's job.

use serde::Serialize;
use std::fmt;
use url::Url;

/// Why an endpoint URI was refused; each variant has a stable snake_case [`code`](Self::code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RejectReason {
    /// The input, or the form it normalises to, is longer than the bound it was resolved
    /// within ([`DEFAULT_MAX_URI_BYTES`] by [`resolve`]); RFC-004 sets none, so this is the
    /// crate's reading. The input is measured first, before any other check.
    #[error("the URI is {length} bytes long as written or once normalised, over the limit of {limit} bytes (uri::DEFAULT_MAX_URI_BYTES; RFC-004 sets none): shorten it, e.g. move a long token out of the query")]
    TooLong {
        /// The longer of the input's length and its normalised form's, in bytes.
        length: usize,
        /// The bound in force.
        limit: usize,
    },
    /// The scheme is not `mcpl:`, `ws:` or `wss:` (RFC-004 §2, §2.2, §11).
    #[error("unsupported scheme {scheme:?}: write the endpoint as mcpl://, wss:// or ws:// (RFC-004 §2; there is no mcpls://)")]
    UnsupportedScheme {
        /// The scheme as written (empty when the input has none).
        scheme: String,
    },
    /// The input contains a control character, space or backslash that a URL parser would
    /// silently strip or reinterpret.
    #[error("invalid character {character:?} at byte {index}: a URL parser would strip or reinterpret it; remove it or percent-encode it")]
    InvalidCharacter {
        /// The offending character.
        character: char,
        /// Its byte offset in the configured input.
        index: usize,
    },
    /// The scheme is not followed by `//` and an authority (RFC-004 §2 grammar).
    #[error("missing authority: the scheme must be followed by \"//\" and a host, as in mcpl://host/path (RFC-004 §2)")]
    MissingAuthority,
    /// The input carries a fragment (`#…`), which has no defined meaning (RFC-004 §2.1).
    #[error("fragment (#…) is not allowed: it has no defined meaning; remove it (RFC-004 §2.1)")]
    Fragment,
    /// The authority carries userinfo (`user:pass@`), a syntax rule of RFC-004 §2.1.
    #[error("userinfo (…@) is not allowed in the authority: remove it and attach credentials out of band (RFC-004 §2.1, §4)")]
    Userinfo,
    /// The authority is empty (`mcpl:///x`), which a parser would silently retarget to host
    /// `x` (RFC-004 §2.1).
    #[error("empty authority: the URI names no host, and a parser would dial its first path segment instead; write the host after \"//\" (RFC-004 §2.1)")]
    EmptyAuthority,
    /// The port is not a decimal number in 0..=65535 (RFC-004 §8 vector 20).
    #[error(
        "invalid port {port:?}: give a decimal port in 0..=65535, or none for 443 (RFC-004 §2)"
    )]
    InvalidPort {
        /// The port as written.
        port: String,
    },
    /// A path segment is `.` or `..`, literally or percent-encoded (RFC-004 §3.2).
    #[error("dot segment {segment:?} in path: `.` and `..` (also %2e-encoded) would be collapsed and retarget the URI; write the path without them (RFC-004 §3.2)")]
    DotSegment {
        /// The segment as written.
        segment: String,
    },
    /// The host is not a valid WHATWG host (forbidden code point, bad IP literal, IDNA failure).
    #[error("invalid host: {detail}; give a DNS name or an IP literal (IPv6 in brackets)")]
    InvalidHost {
        /// The parser's explanation.
        detail: String,
    },
    /// Any other refusal of the WHATWG parser.
    #[error("invalid URI: {detail}; write it as mcpl://host[:port]/path[?query] (RFC-004 §2)")]
    InvalidUri {
        /// The parser's explanation.
        detail: String,
    },
}

impl RejectReason {
    /// The stable snake_case code the CLI and diagnostics print (e.g. `empty_authority`).
    pub fn code(&self) -> &'static str {
        match self {
            RejectReason::TooLong { .. } => "too_long",
            RejectReason::UnsupportedScheme { .. } => "unsupported_scheme",
            RejectReason::InvalidCharacter { .. } => "invalid_character",
            RejectReason::MissingAuthority => "missing_authority",
            RejectReason::Fragment => "fragment",
            RejectReason::Userinfo => "userinfo",
            RejectReason::EmptyAuthority => "empty_authority",
            RejectReason::InvalidPort { .. } => "invalid_port",
            RejectReason::DotSegment { .. } => "dot_segment",
            RejectReason::InvalidHost { .. } => "invalid_host",
            RejectReason::InvalidUri { .. } => "invalid_uri",
        }
    }
}

/// The scheme an endpoint URI was written with (RFC-004 §2.2: all three are accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointScheme {
    /// `mcpl://`, resolved to `wss://` (RFC-004 §2).
    Mcpl,
    /// `wss://`, used as written.
    Wss,
    /// `ws://` (plaintext), used as written; never produced from `mcpl://`.
    Ws,
}

impl EndpointScheme {
    /// The lowercase scheme name without the colon.
    pub const fn as_str(self) -> &'static str {
        match self {
            EndpointScheme::Mcpl => "mcpl",
            EndpointScheme::Wss => "wss",
            EndpointScheme::Ws => "ws",
        }
    }
}

impl fmt::Display for EndpointScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The three values of an endpoint (RFC-004 §5), produced only by [`resolve`].
///
/// Serialises as `{"configuredUri", "canonicalUri", "resolvedTransport"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointUri {
    configured_uri: String,
    canonical_uri: String,
    resolved_transport: String,
    #[serde(skip)]
    scheme: EndpointScheme,
}

impl EndpointUri {
    /// Exactly what the operator or agent wrote, byte for byte (provenance).
    pub fn configured_uri(&self) -> &str {
        &self.configured_uri
    }

    /// The RFC-004 §3 normalised form, for equality, deduplication and "already connected".
    pub fn canonical_uri(&self) -> &str {
        &self.canonical_uri
    }

    /// The `wss://` (or explicitly configured `ws://`) target that is actually dialled.
    pub fn resolved_transport(&self) -> &str {
        &self.resolved_transport
    }

    /// The scheme the configured URI was written with.
    pub fn scheme(&self) -> EndpointScheme {
        self.scheme
    }

    /// Whether the transport is TLS (`wss:`); false only for an explicit `ws://`.
    pub fn is_secure(&self) -> bool {
        self.scheme != EndpointScheme::Ws
    }
}

impl fmt::Display for EndpointUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical_uri)
    }
}

/// The longest configured URI [`resolve`] takes, in bytes: 8 KiB, the least RFC 9110 §4.1
/// recommends every recipient support. RFC-004 sets no length; an endpoint is held three
/// times over ([`EndpointUri`]) and scanned before it is parsed, so a longer one is refused
/// first ([`RejectReason::TooLong`]). [`resolve_within`] takes another bound.
pub const DEFAULT_MAX_URI_BYTES: usize = 8 * 1024;

/// Resolves a configured endpoint URI per RFC-004 §3 (see the module docs for the readings),
/// refusing one longer than [`DEFAULT_MAX_URI_BYTES`].
///
/// A `?token=…` or any other query is passed through as the WHATWG parser serialises it:
/// order and duplicates kept, nothing sorted or decoded (§3, §4).
pub fn resolve(configured: &str) -> Result<EndpointUri, RejectReason> {
    resolve_within(configured, DEFAULT_MAX_URI_BYTES)
}

/// [`resolve`] with another length bound: a `configured` URI longer than `max_bytes` is
/// refused ([`RejectReason::TooLong`]) before any other check reads it, and so is one whose
/// canonical or transport form, once normalised, is longer.
pub fn resolve_within(configured: &str, max_bytes: usize) -> Result<EndpointUri, RejectReason> {
    if configured.len() > max_bytes {
        return Err(RejectReason::TooLong {
            length: configured.len(),
            limit: max_bytes,
        });
    }
    // Scheme: everything before the first ':' (RFC 3986 scheme characters only).
    let colon = configured.find(':');
    let scheme_str = match colon {
        Some(i) if is_scheme(&configured[..i]) => &configured[..i],
        _ => {
            return Err(RejectReason::UnsupportedScheme {
                scheme: String::new(),
            })
        }
    };
    let scheme = if scheme_str.eq_ignore_ascii_case("mcpl") {
        EndpointScheme::Mcpl
    } else if scheme_str.eq_ignore_ascii_case("wss") {
        EndpointScheme::Wss
    } else if scheme_str.eq_ignore_ascii_case("ws") {
        EndpointScheme::Ws
    } else {
        return Err(RejectReason::UnsupportedScheme {
            scheme: scheme_str.to_owned(),
        });
    };
    let after_scheme = &configured[scheme_str.len() + 1..];

    if let Some((index, character)) = configured
        .char_indices()
        .find(|&(_, c)| c.is_ascii_control() || c == ' ' || c == '\\')
    {
        return Err(RejectReason::InvalidCharacter { character, index });
    }
    let Some(hier) = after_scheme.strip_prefix("//") else {
        return Err(RejectReason::MissingAuthority);
    };
    if configured.contains('#') {
        return Err(RejectReason::Fragment);
    }
    let authority_end = hier.find(['/', '?']).unwrap_or(hier.len());
    let authority = &hier[..authority_end];
    if authority.contains('@') {
        return Err(RejectReason::Userinfo);
    }
    if authority.is_empty() {
        return Err(RejectReason::EmptyAuthority);
    }
    check_port(authority)?;
    let rest = &hier[authority_end..];
    let path = &rest[..rest.find('?').unwrap_or(rest.len())];
    if let Some(segment) = path.split('/').find(|s| is_dot_segment(s)) {
        return Err(RejectReason::DotSegment {
            segment: segment.to_owned(),
        });
    }

    // Step 2: substitute the scheme; `mcpl:` never becomes `ws:` (RFC-004 §2).
    let transport_scheme = match scheme {
        EndpointScheme::Mcpl | EndpointScheme::Wss => "wss",
        EndpointScheme::Ws => "ws",
    };
    let rewritten = format!("{transport_scheme}:{after_scheme}");
    // Step 3: the WHATWG parse IS the resolved transport.
    let parsed = Url::parse(&rewritten).map_err(map_parse_error)?;
    let resolved_transport = String::from(parsed);
    // Step 4: the canonical form is that same value with the scheme mapped back.
    let canonical_uri = match scheme {
        EndpointScheme::Mcpl => {
            let tail = resolved_transport.strip_prefix("wss:").ok_or_else(|| {
                RejectReason::InvalidUri {
                    detail: "parser changed the scheme".to_owned(),
                }
            })?;
            format!("mcpl:{tail}")
        }
        EndpointScheme::Wss | EndpointScheme::Ws => resolved_transport.clone(),
    };
    // Percent-encoding may lengthen it: an accepted URI's canonical form must resolve again
    // (its own fixpoint), so the bound holds for what it became as well.
    let normalised = canonical_uri.len().max(resolved_transport.len());
    if normalised > max_bytes {
        return Err(RejectReason::TooLong {
            length: normalised,
            limit: max_bytes,
        });
    }
    Ok(EndpointUri {
        configured_uri: configured.to_owned(),
        canonical_uri,
        resolved_transport,
        scheme,
    })
}

/// RFC 3986 §3.1: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// A complete path segment that is `.` or `..`, literally or percent-encoded (RFC-004 §3.2).
fn is_dot_segment(segment: &str) -> bool {
    let lower = segment.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "." | "%2e" | ".." | ".%2e" | "%2e." | "%2e%2e"
    )
}

/// Checks the port of an authority string: empty or decimal digits in 0..=65535.
fn check_port(authority: &str) -> Result<(), RejectReason> {
    // An IPv6 literal's colons are inside brackets; the port follows the closing bracket.
    let host_end = if authority.starts_with('[') {
        match authority.find(']') {
            Some(i) => i + 1,
            None => {
                return Err(RejectReason::InvalidHost {
                    detail: "unterminated IPv6 literal".to_owned(),
                })
            }
        }
    } else {
        let end = authority.find(':').unwrap_or(authority.len());
        // A bracket belongs to an IPv6 literal only at the host's start: `h[::1]` is a
        // malformed host, not a host `h[` with the port `:1]`.
        if authority[..end].contains(['[', ']']) {
            return Err(RejectReason::InvalidHost {
                detail: "a bracket outside an IPv6 literal".to_owned(),
            });
        }
        end
    };
    let tail = &authority[host_end..];
    if tail.is_empty() {
        return Ok(());
    }
    let Some(port) = tail.strip_prefix(':') else {
        return Err(RejectReason::InvalidHost {
            detail: format!("unexpected {tail:?} after IPv6 literal"),
        });
    };
    let significant = port.trim_start_matches('0');
    let valid = port.bytes().all(|b| b.is_ascii_digit())
        && (significant.is_empty()
            || (significant.len() <= 5 && significant.parse::<u32>().is_ok_and(|n| n <= 65535)));
    if valid {
        Ok(())
    } else {
        Err(RejectReason::InvalidPort {
            port: port.to_owned(),
        })
    }
}

fn map_parse_error(e: url::ParseError) -> RejectReason {
    use url::ParseError as P;
    match e {
        P::EmptyHost
        | P::IdnaError
        | P::InvalidIpv4Address
        | P::InvalidIpv6Address
        | P::InvalidDomainCharacter => RejectReason::InvalidHost {
            detail: e.to_string(),
        },
        P::InvalidPort => RejectReason::InvalidPort {
            port: String::new(),
        },
        _ => RejectReason::InvalidUri {
            detail: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(input: &str) -> &'static str {
        resolve(input).unwrap_err().code()
    }

    #[test]
    fn rfc004_s2_2_ws_and_wss_are_accepted() {
        let wss = resolve("WSS://Example.com:443/x").unwrap();
        assert_eq!(wss.canonical_uri(), "wss://example.com/x");
        assert_eq!(wss.resolved_transport(), "wss://example.com/x");
        assert!(wss.is_secure());
        let ws = resolve("ws://localhost:8080").unwrap();
        assert_eq!(ws.canonical_uri(), "ws://localhost:8080/");
        assert_eq!(ws.resolved_transport(), "ws://localhost:8080/");
        assert!(!ws.is_secure());
        assert_eq!(ws.scheme(), EndpointScheme::Ws);
    }

    #[test]
    fn rfc004_s2_mcpl_never_resolves_to_ws() {
        let e = resolve("mcpl://localhost:8080/").unwrap();
        assert_eq!(e.resolved_transport(), "wss://localhost:8080/");
        assert!(e.is_secure());
    }

    #[test]
    fn rfc004_s11_other_schemes_rejected() {
        for input in [
            "mcpls://h/x",
            "https://h/x",
            "http://h/x",
            "h/x",
            "",
            "//h/x",
        ] {
            assert_eq!(code(input), "unsupported_scheme", "{input}");
        }
    }

    #[test]
    fn rfc004_s2_1_rejections_apply_to_ws_schemes() {
        assert_eq!(code("wss:///evil"), "empty_authority");
        assert_eq!(code("ws://u@h/x"), "userinfo");
        assert_eq!(code("wss://h/x#f"), "fragment");
        assert_eq!(code("ws://h/a/../b"), "dot_segment");
    }

    #[test]
    fn rfc004_s2_1_empty_authority_variants() {
        assert_eq!(code("mcpl://"), "empty_authority");
        assert_eq!(code("mcpl://?q=1"), "empty_authority");
        assert_eq!(code("mcpl:////x"), "empty_authority");
    }

    #[test]
    fn rfc004_s2_1_empty_userinfo_and_fragment_still_rejected() {
        assert_eq!(code("mcpl://@h/x"), "userinfo");
        assert_eq!(code("mcpl://h/x#"), "fragment");
        assert_eq!(code("mcpl://h/x?a=#b"), "fragment");
    }

    #[test]
    fn rfc004_s3_2_dot_segments_all_spellings() {
        for input in [
            "mcpl://h/.",
            "mcpl://h/..",
            "mcpl://h/a/%2E/b",
            "mcpl://h/a/.%2e/b",
            "mcpl://h/a/%2E./b",
            "mcpl://h/a/%2e%2E",
        ] {
            assert_eq!(code(input), "dot_segment", "{input}");
        }
    }

    #[test]
    fn rfc004_s3_2_dots_inside_segments_and_query_are_fine() {
        let e = resolve("mcpl://h/a.b/...?x=../..").unwrap();
        assert_eq!(e.canonical_uri(), "mcpl://h/a.b/...?x=../..");
    }

    #[test]
    fn rfc004_s2_grammar_requires_authority_marker() {
        assert_eq!(code("mcpl:h/x"), "missing_authority");
        assert_eq!(code("wss:/h/x"), "missing_authority");
    }

    #[test]
    fn silently_stripped_characters_rejected() {
        assert_eq!(code(" mcpl://h/x"), "unsupported_scheme");
        assert_eq!(code("mcpl://h/x "), "invalid_character");
        assert_eq!(code("mcpl://ex\tample.com/"), "invalid_character");
        assert_eq!(code("mcpl://h\\x"), "invalid_character");
        assert_eq!(code("mcpl://h/x\n"), "invalid_character");
    }

    #[test]
    fn ports() {
        assert_eq!(code("mcpl://h:65536/x"), "invalid_port");
        assert_eq!(code("mcpl://h:8a/x"), "invalid_port");
        assert_eq!(code("mcpl://h:-1/x"), "invalid_port");
        assert_eq!(code("mcpl://[::1]:99999/x"), "invalid_port");
        assert_eq!(
            resolve("mcpl://h:65535/x").unwrap().canonical_uri(),
            "mcpl://h:65535/x"
        );
        assert_eq!(
            resolve("mcpl://h:0000443/x").unwrap().canonical_uri(),
            "mcpl://h/x"
        );
        assert_eq!(
            resolve("mcpl://h:/x").unwrap().canonical_uri(),
            "mcpl://h/x"
        );
    }

    #[test]
    fn hosts_refused_by_the_parser() {
        assert_eq!(code("mcpl://:443/x"), "invalid_host");
        assert_eq!(code("mcpl://[::1/x"), "invalid_host");
        assert_eq!(code("mcpl://[::1]x/"), "invalid_host");
        assert_eq!(code("mcpl://h<x/"), "invalid_host");
        assert_eq!(code("mcpl://h[::1]/x"), "invalid_host");
        assert_eq!(code("mcpl://h]:1/x"), "invalid_host");
    }

    #[test]
    fn reject_reason_codes_are_stable() {
        let codes = [
            RejectReason::UnsupportedScheme {
                scheme: String::new(),
            },
            RejectReason::InvalidCharacter {
                character: ' ',
                index: 0,
            },
            RejectReason::MissingAuthority,
            RejectReason::Fragment,
            RejectReason::Userinfo,
            RejectReason::EmptyAuthority,
            RejectReason::InvalidPort {
                port: String::new(),
            },
            RejectReason::DotSegment {
                segment: String::new(),
            },
            RejectReason::InvalidHost {
                detail: String::new(),
            },
            RejectReason::InvalidUri {
                detail: String::new(),
            },
        ]
        .map(|r| r.code());
        assert_eq!(
            codes,
            [
                "unsupported_scheme",
                "invalid_character",
                "missing_authority",
                "fragment",
                "userinfo",
                "empty_authority",
                "invalid_port",
                "dot_segment",
                "invalid_host",
                "invalid_uri",
            ]
        );
    }

    #[test]
    fn rfc004_s5_serialises_three_camel_case_values() {
        let e = resolve("mcpl://EIDOVERSE.Animalabs.AI?world=abc").unwrap();
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({
                "configuredUri": "mcpl://EIDOVERSE.Animalabs.AI?world=abc",
                "canonicalUri": "mcpl://eidoverse.animalabs.ai/?world=abc",
                "resolvedTransport": "wss://eidoverse.animalabs.ai/?world=abc",
            })
        );
    }
}
