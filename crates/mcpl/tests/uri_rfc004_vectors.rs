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
