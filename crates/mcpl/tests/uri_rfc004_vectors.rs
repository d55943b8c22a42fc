//! RFC-004 §8: the 20 normative test vectors of the `mcpl://` URI scheme, transcribed by hand
//! from the RFC, plus the §5 three-value and §4 query pass-through properties.

use mcpl::uri::{resolve, EndpointScheme};

/// §8.1: resolution must reproduce both values exactly and keep the input byte for byte.
fn resolves(input: &str, canonical: &str, transport: &str) {
    let e = resolve(input).unwrap_or_else(|r| panic!("{input} rejected: {}", r.code()));
    assert_eq!(e.configured_uri(), input, "configuredUri of {input}");
    assert_eq!(e.canonical_uri(), canonical, "canonicalUri of {input}");
    assert_eq!(
        e.resolved_transport(),
        transport,
        "resolvedTransport of {input}"
    );
    assert_eq!(e.scheme(), EndpointScheme::Mcpl);
}

/// §8.2: rejection with the given stable code.
fn rejects(input: &str, code: &str) {
    match resolve(input) {
        Ok(e) => panic!("{input} accepted as {}", e.resolved_transport()),
        Err(r) => assert_eq!(r.code(), code, "{input}: {r}"),
    }
}

#[test]
fn rfc004_s8_v01_bare_host_gets_root_path() {
    resolves(
        "mcpl://example.com",
        "mcpl://example.com/",
        "wss://example.com/",
    );
}

#[test]
fn rfc004_s8_v02_path() {
    resolves(
        "mcpl://example.com/path",
        "mcpl://example.com/path",
        "wss://example.com/path",
    );
}

#[test]
fn rfc004_s8_v03_non_default_port_kept() {
    resolves(
        "mcpl://example.com:8443/x",
        "mcpl://example.com:8443/x",
        "wss://example.com:8443/x",
    );
}

#[test]
fn rfc004_s8_v04_query_without_path() {
    resolves(
        "mcpl://eidoverse.animalabs.ai?world=abc",
        "mcpl://eidoverse.animalabs.ai/?world=abc",
        "wss://eidoverse.animalabs.ai/?world=abc",
    );
}

#[test]
fn rfc004_s8_v05_scheme_and_host_case() {
    resolves(
        "MCPL://Example.COM/x",
        "mcpl://example.com/x",
        "wss://example.com/x",
    );
}

#[test]
fn rfc004_s8_v06_default_port_elided_host_lowercased() {
    resolves(
        "mcpl://EIDOVERSE.Animalabs.AI:443/x",
        "mcpl://eidoverse.animalabs.ai/x",
        "wss://eidoverse.animalabs.ai/x",
    );
}

#[test]
fn rfc004_s8_v07_idna() {
    resolves(
        "mcpl://ünicode.example/x",
        "mcpl://xn--nicode-2ya.example/x",
        "wss://xn--nicode-2ya.example/x",
    );
}

#[test]
fn rfc004_s8_v08_ipv6_lowercased() {
    resolves(
        "mcpl://[2001:DB8::1]:8443/x",
        "mcpl://[2001:db8::1]:8443/x",
        "wss://[2001:db8::1]:8443/x",
    );
}

#[test]
fn rfc004_s8_v09_localhost_not_special() {
    resolves(
        "mcpl://localhost/x",
        "mcpl://localhost/x",
        "wss://localhost/x",
    );
}

#[test]
fn rfc004_s8_v10_query_order_kept() {
    resolves(
        "mcpl://h/p?b=2&a=1",
        "mcpl://h/p?b=2&a=1",
        "wss://h/p?b=2&a=1",
    );
}

#[test]
fn rfc004_s8_v11_query_duplicates_kept() {
    resolves(
        "mcpl://h/x?a=1&a=2",
        "mcpl://h/x?a=1&a=2",
        "wss://h/x?a=1&a=2",
    );
}

#[test]
fn rfc004_s8_v12_encoded_slash_is_one_segment() {
    resolves("mcpl://h/a%2fb", "mcpl://h/a%2fb", "wss://h/a%2fb");
}

#[test]
fn rfc004_s8_v13_percent_encoding_not_normalised() {
    resolves("mcpl://h/%7Euser", "mcpl://h/%7Euser", "wss://h/%7Euser");
}

#[test]
fn rfc004_s8_v14_empty_authority() {
    rejects("mcpl:///x", "empty_authority");
}

#[test]
fn rfc004_s8_v15_userinfo() {
    rejects("mcpl://u:p@h/x", "userinfo");
}

#[test]
fn rfc004_s8_v16_fragment() {
    rejects("mcpl://h/x#frag", "fragment");
}

#[test]
fn rfc004_s8_v17_dot_segment() {
    rejects("mcpl://h/a/../b", "dot_segment");
}

#[test]
fn rfc004_s8_v18_dot_segment_percent_encoded() {
    rejects("mcpl://h/a/%2e%2e/b", "dot_segment");
}

#[test]
fn rfc004_s8_v19_single_dot_segment() {
    rejects("mcpl://h/a/./b", "dot_segment");
}

#[test]
fn rfc004_s8_v20_port_out_of_range() {
    rejects("mcpl://h:99999/x", "invalid_port");
}

#[test]
fn rfc004_s4_token_query_passes_through_untouched() {
    let input = "mcpl://h/x?token=abc.DEF-_~%2B%3D&world=w";
    let e = resolve(input).unwrap();
    assert_eq!(e.configured_uri(), input);
    assert_eq!(
        e.canonical_uri(),
        "mcpl://h/x?token=abc.DEF-_~%2B%3D&world=w"
    );
    assert_eq!(
        e.resolved_transport(),
        "wss://h/x?token=abc.DEF-_~%2B%3D&world=w"
    );
}

#[test]
fn rfc004_s5_two_spellings_share_one_canonical_uri() {
    let a = resolve("mcpl://EIDOVERSE.Animalabs.AI:443?world=abc").unwrap();
    let b = resolve("mcpl://eidoverse.animalabs.ai/?world=abc").unwrap();
    assert_ne!(a.configured_uri(), b.configured_uri());
    assert_eq!(a.canonical_uri(), b.canonical_uri());
    assert_eq!(a.resolved_transport(), b.resolved_transport());
}

/// RFC-004 sets no length; a configured URI is held three times over (configured,
/// canonical, transport) and scanned before it is parsed, so one longer than
/// `uri::DEFAULT_MAX_URI_BYTES` (8 KiB, the least RFC 9110 §4.1 asks every recipient to
/// take) is refused first, with a code of its own, before any other check reads it.
#[test]
fn a_uri_past_the_length_bound_is_refused_with_a_clear_error() {
    use mcpl::uri::{resolve_within, DEFAULT_MAX_URI_BYTES};
    let start = "mcpl://h/x?token=";
    let at_bound = format!("{start}{}", "a".repeat(DEFAULT_MAX_URI_BYTES - start.len()));
    assert_eq!(at_bound.len(), DEFAULT_MAX_URI_BYTES);
    let e = resolve(&at_bound).unwrap();
    assert_eq!(e.configured_uri(), at_bound);
    let over = format!("{at_bound}a");
    let refused = resolve(&over).unwrap_err();
    assert_eq!(refused.code(), "too_long");
    let said = refused.to_string();
    assert!(
        said.contains(&DEFAULT_MAX_URI_BYTES.to_string()) && said.contains(&over.len().to_string()),
        "{said}"
    );
    assert!(said.len() < 400, "the refusal repeats the URI: {said}");
    // The length is checked before anything else: a long URI with a fragment is too long.
    assert_eq!(
        resolve(&format!("{over}#f")).unwrap_err().code(),
        "too_long"
    );
    // Another bound is the caller's to choose.
    assert_eq!(
        resolve_within("mcpl://h/x", 9).unwrap_err().code(),
        "too_long"
    );
    assert!(resolve_within("mcpl://h/x", 10).is_ok());
}

/// Dialling names a URI refused as too long by its start only: the error does not carry
/// (nor print) the whole input.
#[cfg(feature = "runtime")]
#[test]
fn a_dial_refused_as_too_long_names_the_uri_by_its_start() {
    use mcpl::transport::endpoint::{resolve_ws, EndpointError, REFUSED_URI_SHOWN_BYTES};
    let over = format!("mcpl://h/x?t={}", "é".repeat(100_000));
    match resolve_ws(&over) {
        Err(e @ EndpointError::Refused { .. }) => {
            let said = e.to_string();
            assert!(said.contains("too_long"), "{said}");
            assert!(
                said.len() < REFUSED_URI_SHOWN_BYTES + 600,
                "{} bytes",
                said.len()
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The bound holds for what the URI becomes too: an input under it whose normalised form
/// is longer (the WHATWG parser percent-encodes `é` as `%C3%A9`) is refused, so the
/// canonical URI of every accepted input resolves again (the §5 fixpoint the fuzz body
/// checks).
#[test]
fn a_uri_whose_normalised_form_is_past_the_bound_is_refused() {
    use mcpl::uri::DEFAULT_MAX_URI_BYTES;
    let input = format!("mcpl://h/{}", "é".repeat(DEFAULT_MAX_URI_BYTES / 4));
    assert!(input.len() <= DEFAULT_MAX_URI_BYTES);
    match resolve(&input) {
        Ok(e) => {
            let again = resolve(e.canonical_uri());
            assert!(
                again.is_ok(),
                "the canonical URI no longer resolves: {again:?}"
            );
        }
        Err(r) => assert_eq!(r.code(), "too_long", "{r}"),
    }
    assert_eq!(resolve(&input).unwrap_err().code(), "too_long");
}
