//! The cargo-fuzz target bodies (`fuzz/src/lib.rs`), run on the stable toolchain with
//! proptest-generated inputs: the digest (§17.2), the RFC-004 resolver, the §5.1
//! advertisement walk and the framing + `Message::parse`. See RELIABILITY.md.
#![cfg(feature = "runtime")]

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod bodies;

use mcpl::capability::Capability;
use mcpl::transport::Frame;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

/// Any JSON value, with numbers at the edges of f64/u64/i64 and keys that matter to the
/// digest (`revision`, `version`, `featureSets`, `tags`, `uses`).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(1e300)),
        Just(json!(5e-324)),
        Just(json!(-0.0)),
        ".{0,12}".prop_map(Value::String),
        "[a-z][a-zA-Z0-9_.-]{0,8}".prop_map(Value::String),
    ];
    let key = prop_oneof![
        Just("revision".to_owned()),
        Just("version".to_owned()),
        Just("featureSets".to_owned()),
        Just("tags".to_owned()),
        Just("uses".to_owned()),
        Just("channels".to_owned()),
        "[a-zA-Z_][a-zA-Z0-9_.-]{0,8}",
        ".{0,6}",
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Advertisement-shaped JSON: nested objects whose keys are mostly real path segments.
fn advertisement() -> impl Strategy<Value = Value> {
    let mut segments: Vec<String> = Capability::ALL
        .iter()
        .flat_map(|c| c.segments().map(str::to_owned))
        .collect();
    segments.sort();
    segments.dedup();
    segments.push("unknownThing".into());
    segments.push("".into());
    let key = prop::sample::select(segments);
    let leaf = prop_oneof![
        4 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Null),
        1 => Just(json!(1)),
        1 => Just(json!("true")),
        1 => Just(json!([true])),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop::collection::vec((key.clone(), inner), 0..6)
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()))
    })
}

fn uri_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "(mcpl|MCPL|McPl|ws|WS|wss|Wss|http|https|file|)(://|:/|:)[a-zA-Z0-9.:@%_~\\[\\]-]{0,24}(/[a-zA-Z0-9%._~-]{0,8}){0,3}(\\?[a-z0-9=&%]{0,12})?(#[a-z]{0,4})?",
        "mcpl://(localhost|127\\.0\\.0\\.1|\\[::1\\]|example\\.com|EXAMPLE\\.com\\.|xn--bcher-kva\\.example|b\u{fc}cher\\.example)(:[0-9]{0,6})?(/[a-zA-Z0-9%./_-]{0,12})?(\\?token=[a-z0-9%]{0,6})?",
        ".{0,40}",
    ]
}

/// A byte stream that looks like newline-delimited JSON-RPC with damage: lines, `\r`,
/// invalid UTF-8, braces and quotes.
fn line_stream() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec()),
        Just(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#.to_vec()),
        Just(br#"{"jsonrpc":"2.0","method":"n","params":[1e400]}"#.to_vec()),
        Just(br#"["\ud800",{"jsonrpc":"2.0"}]"#.to_vec()),
        Just(vec![0xff, 0xfe, 0xc3]),
        Just("é€😀".as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..12),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn s17_2_digest_body_holds_on_any_json(v in json_value()) {
        bodies::digest_value(&v);
    }

    #[test]
    fn s17_2_digest_body_holds_on_any_bytes(data in prop::collection::vec(any::<u8>(), 0..64)) {
        bodies::digest(&data);
    }

    #[test]
    fn rfc004_uri_body_holds_on_uri_like_text(text in uri_like()) {
        bodies::uri_text(&text);
    }

    #[test]
    fn s5_1_advertised_body_holds_on_advertisement_shapes(v in advertisement()) {
        bodies::advertised_value(&v);
    }

    #[test]
    fn s5_1_advertised_body_holds_on_any_json(v in json_value()) {
        bodies::advertised_value(&v);
    }

    #[test]
    fn framing_body_matches_the_reference_split(
        stream in line_stream(),
        limit in 1usize..96,
        chunks in prop::collection::vec(1usize..40, 1..8),
    ) {
        bodies::framing_case(&stream, limit, &chunks);
    }

    #[test]
    fn framing_body_holds_on_raw_fuzzer_input(data in prop::collection::vec(any::<u8>(), 0..512)) {
        bodies::framing(&data);
    }
}

#[test]
fn framing_reference_pins_the_limit_edges() {
    // Exactly at the limit with and without `\r`, one over, and an unterminated tail.
    let frames = bodies::framing_case(b"abc\nabc\r\nabcd\nab\xff\nzz", 3, &[2]);
    assert_eq!(
        frames,
        vec![
            Frame::Text("abc".into()),
            Frame::Text("abc".into()),
            Frame::Oversized { bytes: 4, limit: 3 },
            frames[3].clone(),
            Frame::Text("zz".into()),
        ]
    );
    assert!(matches!(frames[3], Frame::NotText { .. }));
}

#[test]
fn fuzz_bodies_accept_the_seed_corpus() {
    // One typical input per target: each body accepts well-formed input without complaint.
    bodies::digest(
        br#"{"version":"1","revision":"sha256:x","featureSets":{"a":{"uses":["pushEvents"]}}}"#,
    );
    bodies::uri(b"mcpl://example.com/path?token=abc");
    bodies::uri(b"ws://127.0.0.1:4000/");
    bodies::advertised(
        br#"{"pushEvents":true,"contextHooks":{"beforeInference":true},"channels":{}}"#,
    );
    bodies::framing(b"\x10\x03{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\njunk\n");
}
